import Foundation
import Testing
@testable import MatteEngine
import TestPaths
import MattePixels

/// Robust Video Matting on the installed model (the authors' ONNX export) and the real ONNX Runtime.
struct RVMEngineTests {
    private var options: EngineOptions { EngineOptions(modelDir: TestPaths.fullModelDir) }
    private static let width = 512, height = 288

    /// The engine's alphas of `frames` (w×h BGRA), one plane each, the states carried.
    private func alphas(_ engine: RVMEngine, _ frames: [[UInt8]], width: Int, height: Int, stride: Int? = nil) throws -> [[UInt8]] {
        var report = FrameReport(modelCount: engine.modelNames.count)
        return try frames.map { frame in
            let rowBytes = stride ?? width * 4
            var padded = frame
            if rowBytes != width * 4 {  // the same pixels in rows with padding after them
                padded = [UInt8](repeating: 0xA5, count: rowBytes * height)
                for y in 0..<height {
                    padded.replaceSubrange(y * rowBytes..<(y * rowBytes + width * 4), with: frame[(y * width * 4)..<((y + 1) * width * 4)])
                }
            }
            var plane = [UInt8](repeating: 0, count: width * height)
            report.clear()
            try padded.withUnsafeBufferPointer { pixels in
                try plane.withUnsafeMutableBufferPointer { out in
                    try engine.matte(BGRAImage(base: pixels.baseAddress!, width: width, height: height, stride: rowBytes),
                                     into: GrayImage(base: out.baseAddress!, width: width, height: height, stride: width),
                                     report: &report)
                }
            }
            #expect(report.modelMs[0] > 0)
            return plane
        }
    }

    private func reference(_ name: String, width: Int, height: Int) throws -> [[UInt8]] {
        let path = TestPaths.dataDir + "/" + name
        let data = try #require(FileManager.default.contents(atPath: path), "missing \(path): run scripts/test.sh")
        let size = width * height
        return stride(from: 0, to: data.count - size + 1, by: size).map { Array(data[$0..<$0 + size]) }
    }

    /// Every frame of the dancer within 1 LSB of Python ONNX Runtime on the same frames, at two sizes
    /// and two ratios (0.9375 at 512×288, 0.25 at 1920×1088): the states carried from frame to frame,
    /// the input conversion and the quantisation are the reference's.
    @Test(arguments: [(512, 288, 40), (1920, 1088, 10)])
    func matchesPythonOnnxRuntimeOnTheDancer(size: (Int, Int, Int)) throws {
        let (width, height, count) = size
        let frames = Array(try TestPaths.frames("test-sample2-\(width)x\(height).bgra", width: width, height: height).prefix(count))
        let expected = try reference("rvm-reference-\(width)x\(height).gray", width: width, height: height)
        try #require(frames.count == count && expected.count == count)
        let engine = try RVMEngine(options: options)
        let got = try alphas(engine, frames, width: width, height: height)
        #expect(engine.ratio == RVMEngine.automaticRatio(width: width, height: height))
        var worst = 0, differing = 0
        for (index, (a, b)) in zip(got, expected).enumerated() {
            let difference = zip(a, b).map { abs(Int($0) - Int($1)) }.max() ?? 0
            differing += zip(a, b).filter { $0 != $1 }.count
            #expect(difference <= 1, "frame \(index): \(difference) LSB from Python ONNX Runtime")
            worst = max(worst, difference)
        }
        // The picture is a matte, not a blank: the dancer covers a real part of it.
        let covered = got[count - 1].filter { $0 >= 128 }.count
        #expect(covered > width * height / 50 && covered < width * height / 2)
        print("rvm \(width)x\(height): worst \(worst) LSB, \(differing) of \(count * width * height) bytes differ")
    }

    /// The states carry time (a frame's alpha depends on the frames before it), and reset, reseed and
    /// a new size start them over: afterwards the engine gives a fresh engine's bytes.
    @Test func resetReseedAndANewSizeStartTheStatesOver() throws {
        let frames = try TestPaths.frames("test-sample2-512x288.bgra", width: 512, height: 288)
        let w = RVMEngineTests.width, h = RVMEngineTests.height
        let fresh = try alphas(try RVMEngine(options: options), Array(frames[0..<4]), width: w, height: h)
        let engine = try RVMEngine(options: options)
        _ = try alphas(engine, Array(frames[20..<30]), width: w, height: h)
        let carried = try alphas(engine, [frames[0]], width: w, height: h)[0]
        #expect(carried != fresh[0], "the states carried nothing: frame 0 after ten others equals frame 0 first")
        engine.reset()
        #expect(try alphas(engine, Array(frames[0..<4]), width: w, height: h) == fresh)
        _ = try alphas(engine, Array(frames[20..<25]), width: w, height: h)
        engine.reseed(nil)
        #expect(try alphas(engine, Array(frames[0..<4]), width: w, height: h) == fresh)
        // Another size, then this one again: its states start from zeros too.
        _ = try alphas(engine, Array(frames[20..<25]), width: w, height: h)
        let small = [UInt8](repeating: 90, count: 64 * 48 * 4)
        _ = try alphas(engine, [small], width: 64, height: 48)
        #expect(try alphas(engine, Array(frames[0..<4]), width: w, height: h) == fresh)
    }

    /// Rows with padding after them (a stride wider than the row) give the packed frame's bytes.
    @Test func stridedFramesGiveThePackedFramesAlpha() throws {
        let frames = Array(try TestPaths.frames("test-sample2-512x288.bgra", width: 512, height: 288).prefix(3))
        let packed = try alphas(try RVMEngine(options: options), frames, width: 512, height: 288)
        let strided = try alphas(try RVMEngine(options: options), frames, width: 512, height: 288, stride: 512 * 4 + 64)
        #expect(packed == strided)
    }

    /// Odd and tiny sizes run (the network crops its own strides' rounding): an alpha of the frame's
    /// size, twice in a row (the second frame reads the states the first wrote).
    @Test(arguments: [(1, 1), (2, 3), (5, 7), (17, 23), (101, 77), (33, 600), (1283, 9)])
    func oddAndTinySizesRun(size: (Int, Int)) throws {
        let (width, height) = size
        var frame = [UInt8](repeating: 0, count: width * height * 4)
        for i in frame.indices { frame[i] = UInt8((i * 37 + i / 7) & 0xFF) }
        let engine = try RVMEngine(options: options)
        let out = try alphas(engine, [frame, frame], width: width, height: height)
        #expect(out.count == 2 && out.allSatisfy { $0.count == width * height })
    }

    /// An explicit ratio is the one the network runs at; out-of-range ratios are refused with the range.
    @Test func theRatioIsTheOneAskedForAndOutOfRangeIsRefused() throws {
        var asked = options
        asked.rvmDownsampleRatio = 0.5
        let engine = try RVMEngine(options: asked)
        let frames = Array(try TestPaths.frames("test-sample2-512x288.bgra", width: 512, height: 288).prefix(2))
        let half = try alphas(engine, frames, width: 512, height: 288)
        #expect(engine.ratio == 0.5)
        let automatic = try alphas(try RVMEngine(options: options), frames, width: 512, height: 288)
        #expect(half != automatic)
        #expect(RVMEngine.automaticRatio(width: 1920, height: 1080) == 0.25)
        #expect(RVMEngine.automaticRatio(width: 720, height: 1280) == 0.375)
        #expect(RVMEngine.automaticRatio(width: 320, height: 240) == 1)
        for bad in [0.01, 1.5, -0.2, Double.nan] {
            var options = self.options
            options.rvmDownsampleRatio = bad
            #expect {
                try RVMEngine(options: options)
            } throws: { error in
                guard case let .badSettings(detail) = error as? EngineError else { return false }
                return detail.contains("downsample-ratio") && detail.contains("0.03125")
            }
        }
    }

    /// precision=bf16 runs the same file through OpenVINO with bfloat16 arithmetic where the CPU computes
    /// it: close to fp32 (mean |Δα| and the IoU of the masks on the dancer); elsewhere it is refused,
    /// saying why. MatAnyone2's other precisions are refused for RVM.
    @Test func bf16IsCloseToFp32WhereTheCpuComputesItAndRefusedElsewhere() throws {
        var bf16 = options
        bf16.precision = .bf16
        guard CpuFeatures.current.bf16Problem == nil else {
            #expect {
                try RVMEngine(options: bf16)
            } throws: { error in
                guard case let .badSettings(detail) = error as? EngineError else { return false }
                return detail.contains("precision=bf16 needs a CPU that computes bf16")
            }
            return
        }
        let frames = Array(try TestPaths.frames("test-sample2-512x288.bgra", width: 512, height: 288).prefix(10))
        let engine = try RVMEngine(options: bf16)
        #expect(engine.precision == .bf16 && engine.provider == .openvino)
        let reduced = try alphas(engine, frames, width: 512, height: 288)
        let exact = try alphas(try RVMEngine(options: options), frames, width: 512, height: 288)
        var total = 0.0, both = 0, either = 0
        for (a, b) in zip(reduced, exact) {
            for (x, y) in zip(a, b) {
                total += Double(abs(Int(x) - Int(y)))
                if x >= 128 && y >= 128 { both += 1 }
                if x >= 128 || y >= 128 { either += 1 }
            }
        }
        let mean = total / Double(10 * 512 * 288) / 255, iou = Double(both) / Double(either)
        print("rvm bf16 vs fp32 on 10 dancer frames at 512x288: mean |dα| \(mean), IoU \(iou)")
        #expect(mean < 0.01 && iou > 0.97)
        #expect(reduced != exact, "bf16 gave fp32's bytes: it did not run in bf16")
        for other in [ModelPrecision.int8, .fp16] {
            var asked = options
            asked.precision = other
            #expect {
                try RVMEngine(options: asked)
            } throws: { error in
                guard case let .badSettings(detail) = error as? EngineError else { return false }
                return detail.contains("precision=\(other.rawValue)") && detail.contains("RVM runs fp32")
            }
        }
    }

    /// A frame size whose work would pass the memory budget is refused with the size, the need and what
    /// to do, before anything is allocated; a size within it runs.
    @Test func aFrameOverTheMemoryBudgetIsRefused() throws {
        var options = self.options
        options.memoryBudget = 64 << 20
        let engine = try RVMEngine(options: options)
        let frame = [UInt8](repeating: 100, count: 1920 * 1080 * 4)
        #expect {
            _ = try alphas(engine, [frame], width: 1920, height: 1080)
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("1920×1080") && detail.contains("budget of 64 MiB") && detail.contains("videoscale")
        }
        let small = [UInt8](repeating: 100, count: 320 * 180 * 4)
        #expect(try alphas(engine, [small], width: 320, height: 180)[0].count == 320 * 180)
    }

    /// A copy of the installed RVM set that a test may damage.
    private func copyOfModelSet() throws -> String {
        let source = ModelLocations.engineDir(modelDir: TestPaths.fullModelDir, engine: "rvm")
        let target = TestPaths.scratch("rvm-copy") + "/rvm"
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        for name in try FileManager.default.contentsOfDirectory(atPath: source) {
            try FileManager.default.copyItem(atPath: source + "/" + name, toPath: target + "/" + name)
        }
        return target
    }

    @Test func aMissingCorruptOrForeignModelIsAClearError() throws {
        #expect {
            try RVMEngine(options: EngineOptions(modelDir: "/nonexistent/models"))
        } throws: { error in
            guard case let .modelMissing(path, hint) = error as? EngineError else { return false }
            return path.hasPrefix("/nonexistent/models") && hint.contains("scripts/setup.sh")
        }
        // Damaged bytes: the manifest's digest catches them before the runtime sees them.
        let damaged = try copyOfModelSet()
        let file = damaged + "/rvm_mobilenetv3_fp32.onnx"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        bytes[bytes.count / 2] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: file))
        #expect {
            try RVMEngine(options: EngineOptions(modelDir: damaged))
        } throws: { error in
            guard case let .modelInvalid(path, detail) = error as? EngineError else { return false }
            return path == file && detail.contains("sha256")
        }
        // Another network under RVM's name (the segmenter's file, the digest removed): not RVM's graph.
        let foreign = try copyOfModelSet()
        let segmenter = ModelLocations.engineDir(modelDir: TestPaths.fullModelDir, engine: "segmenter") + "/selfie_segmentation.onnx"
        try FileManager.default.removeItem(atPath: foreign + "/rvm_mobilenetv3_fp32.onnx")
        try FileManager.default.copyItem(atPath: segmenter, toPath: foreign + "/rvm_mobilenetv3_fp32.onnx")
        let manifestPath = foreign + "/manifest.json"
        var json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: manifestPath))) as! [String: Any]
        var models = json["models"] as! [String: Any]
        var entry = models["rvm"] as! [String: Any]
        entry.removeValue(forKey: "sha256")
        entry["inputs"] = [[String: Any]]()
        entry["outputs"] = [[String: Any]]()
        models["rvm"] = entry
        json["models"] = models
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: manifestPath))
        #expect {
            try RVMEngine(options: EngineOptions(modelDir: foreign))
        } throws: { error in
            guard case let .modelInvalid(_, detail) = error as? EngineError else { return false }
            return detail.contains("not Robust Video Matting's graph")
        }
        // Not a model at all.
        let garbage = try copyOfModelSet()
        try Data("not an onnx file".utf8).write(to: URL(fileURLWithPath: garbage + "/rvm_mobilenetv3_fp32.onnx"))
        #expect(throws: EngineError.self) { try RVMEngine(options: EngineOptions(modelDir: garbage)) }
    }

    /// engine=auto: MatAnyone2 where its set is, else RVM where its set is, else the segmenter.
    @Test func autoRunsMatAnyone2ThenRVMThenTheSegmenter() throws {
        let root = TestPaths.scratch("auto-choice")
        let full = TestPaths.fullModelDir
        for set in ["segmenter"] {
            try FileManager.default.createSymbolicLink(atPath: root + "/" + set, withDestinationPath: full + "/" + set)
        }
        #expect(resolveEngine(.auto, options: EngineOptions(modelDir: root)) == .segmenter)
        try FileManager.default.createSymbolicLink(atPath: root + "/rvm", withDestinationPath: full + "/rvm")
        #expect(resolveEngine(.auto, options: EngineOptions(modelDir: root)) == .rvm)
        let made = try makeEngine(.auto, options: EngineOptions(modelDir: root), parameters: MatAnyone2Parameters(),
                                  workingShortSide: 288, seed: { .automatic })
        #expect(made.kind == .rvm)
        try FileManager.default.createSymbolicLink(atPath: root + "/matanyone2", withDestinationPath: full + "/matanyone2")
        #expect(resolveEngine(.auto, options: EngineOptions(modelDir: root)) == .matanyone2)
        #expect(resolveEngine(.segmenter, options: EngineOptions(modelDir: root)) == .segmenter)
        #expect(resolveEngine(.rvm, options: EngineOptions(modelDir: root)) == .rvm)
        // model-placement is MatAnyone2's: with RVM it is refused, naming the engine.
        var placed = EngineOptions(modelDir: root + "/rvm")
        placed.placement = try ModelPlacement.parse("encoder=bf16")
        #expect {
            try makeEngine(.rvm, options: placed, parameters: MatAnyone2Parameters(), workingShortSide: 288, seed: { .automatic })
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("the engine is RVM")
        }
    }

    /// RVM makes the closer first-frame mask of the dancer (against the hand-made one): the reason it
    /// seeds MatAnyone2 where it is installed. Measured here, at the tests' 512×288.
    @Test func rvmSeedsCloserToTheHandMadeMaskThanTheSegmenter() throws {
        let frame = try TestPaths.frames("test-sample2-512x288.bgra", width: 512, height: 288)[0]
        let maskPath = TestPaths.dataDir + "/test-sample2-mask-512x288.gray"
        let mask = try #require(FileManager.default.contents(atPath: maskPath)).map { $0 >= 128 }
        func iou(_ alpha: [UInt8]) -> Double {
            var both = 0, either = 0
            for (a, m) in zip(alpha.map { $0 >= 128 }, mask) {
                if a && m { both += 1 }
                if a || m { either += 1 }
            }
            return Double(both) / Double(max(either, 1))
        }
        let rvm = iou(try alphas(try RVMEngine(options: options), [frame], width: 512, height: 288)[0])
        let segmenter = try SegmenterEngine(options: options)
        var plane = [UInt8](repeating: 0, count: 512 * 288)
        var report = FrameReport(modelCount: 1)
        try frame.withUnsafeBufferPointer { pixels in
            try plane.withUnsafeMutableBufferPointer { out in
                try segmenter.matte(BGRAImage(base: pixels.baseAddress!, width: 512, height: 288, stride: 2048),
                                    into: GrayImage(base: out.baseAddress!, width: 512, height: 288, stride: 512), report: &report)
            }
        }
        let seg = iou(plane)
        print("first-frame IoU with the hand-made mask at 512x288: rvm \(rvm), segmenter \(seg)")
        #expect(rvm > 0.85)
        #expect(rvm > seg + 0.1)
    }

    /// MatAnyone2 with seed=auto in a folder that has RVM: RVM seeds it (its time in the report's last
    /// slot, named rvm); seeder=segmenter keeps the segmenter.
    @Test func rvmSeedsMatAnyone2WhereItIsInstalled() throws {
        let frames = Array(try TestPaths.frames("test-sample2-512x288.bgra", width: 512, height: 288).prefix(2))
        var options = self.options
        let engine = try MatAnyone2Engine(options: options, workingShortSide: 288, seed: .automatic)
        #expect(engine.seederKind == .rvm && engine.modelNames.last == "rvm")
        var plane = [UInt8](repeating: 0, count: 512 * 288)
        var report = FrameReport(modelCount: engine.modelNames.count)
        try frames[0].withUnsafeBufferPointer { pixels in
            try plane.withUnsafeMutableBufferPointer { out in
                try engine.matte(BGRAImage(base: pixels.baseAddress!, width: 512, height: 288, stride: 2048),
                                 into: GrayImage(base: out.baseAddress!, width: 512, height: 288, stride: 512), report: &report)
            }
        }
        #expect(report.seeded)
        #expect(report.modelMs.last! > 0)
        options.seeder = .segmenter
        let segmented = try MatAnyone2Engine(options: options, workingShortSide: 288, seed: .automatic)
        #expect(segmented.seederKind == .segmenter && segmented.modelNames.last == "segmenter")
        // Where RVM is absent, auto falls back to the segmenter.
        #expect(MatAnyone2Engine.seederKind(.auto, modelDir: TestPaths.modelDir) == .segmenter)
    }
}
