import Foundation
import Testing
@testable import MatteEngine
import TestPaths
import MattePixels

/// Extreme and hostile inputs to the engine: each must end in the documented error, never a trap,
/// an abort or a hang.
@Suite(.serialized) struct HardeningTests {
    // MARK: Checked sizes

    @Test func sizeArithmeticRefusesOverflowAndNegatives() throws {
        #expect(checkedProduct([Int.max, 2]) == nil)
        #expect(checkedProduct([3, -1]) == nil)
        #expect(checkedProduct([2, 3, 4]) == 24)
        #expect(checkedSum([Int.max, 1]) == nil)
        #expect(checkedSum([1, nil]) == nil)
        #expect(MemoryBank.bytesNeeded(keyDim: 64, valueDim: 256, tokensPerFrame: Int.max / 2, maxFrames: 5) == nil)
        #expect(throws: EngineError.self) { try MemoryBank(keyDim: 64, valueDim: 256, tokensPerFrame: 1 << 40, maxFrames: 100) }
        let runtime = try OnnxRuntime.shared()
        #expect {
            try Tensor(runtime: runtime, shape: [1, Int.max / 2, 4], name: "huge")
        } throws: { error in
            guard case let .modelInvalid(path, detail) = error as? EngineError else { return false }
            return path == "huge" && detail.contains("more elements than fit")
        }
        #expect {
            try Tensor(runtime: runtime, shape: [1, -5, 4], name: "negative")
        } throws: { error in
            guard case .modelInvalid = error as? EngineError else { return false }
            return true
        }
    }

    /// The similarity scratch is read in blocks of queries, so a large working size no longer needs a
    /// quadratic matrix: 4096×2160 asked for 24 GB before.
    @Test func memoryBankScratchStaysBounded() throws {
        let tokens = (4096 / 16) * (2160 / 16)
        let bytes = try #require(MemoryBank.bytesNeeded(keyDim: 64, valueDim: 256, tokensPerFrame: tokens, maxFrames: 5))
        #expect(bytes < 400 << 20, "\(bytes) bytes")
    }

    /// A working size over the budget is a settings error naming the largest one that fits.
    @Test func workingSizeOverTheMemoryBudgetNamesTheLargestThatFits() throws {
        var options = EngineOptions(modelDir: TestPaths.modelDir)
        options.memoryBudget = 1 << 30
        let engine = try MatAnyone2Engine(options: options, workingShortSide: 1080, seed: .mask(pixels: [255], width: 1, height: 1))
        var message = ""
        #expect {
            _ = try engine.warmUp(width: 1920, height: 1080)
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            message = detail
            return detail.contains("working-size=1080") && detail.contains("largest that fits is working-size=")
        }
        // The size it names does fit.
        let named = message.components(separatedBy: "largest that fits is working-size=").last?.prefix { $0.isNumber } ?? ""
        let fitting = try #require(Int(named))
        #expect(fitting >= 16 && fitting < 1080)
        let smaller = try MatAnyone2Engine(options: options, workingShortSide: fitting, seed: .mask(pixels: [255], width: 1, height: 1))
        #expect(try smaller.warmUp(width: 1920, height: 1080) > 0)
        options.memoryBudget = 16 << 30
        let huge = try MatAnyone2Engine(options: options, workingShortSide: 4096, seed: .mask(pixels: [255], width: 1, height: 1))
        #expect {
            _ = try huge.warmUp(width: 1920, height: 1080)
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("working-size=4096") && detail.contains("16.0 GiB")
        }
        let native = try MatAnyone2Engine(options: options, workingShortSide: 0, seed: .mask(pixels: [255], width: 1, height: 1))
        #expect {
            _ = try native.warmUp(width: 4096, height: 2160)
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("working-size=0")
        }
    }

    // MARK: Hostile model sets

    /// A copy of the test MatAnyone2 set (hard links: the tests only replace files, never write into them).
    private func copyOfMatAnyone2Set() throws -> String {
        let source = ModelLocations.matAnyone2Dir(modelDir: TestPaths.modelDir, precision: .fp32)
        let target = TestPaths.scratch("matanyone2-copy")
        for name in try FileManager.default.contentsOfDirectory(atPath: source) {
            if name == "manifest.json" {
                try FileManager.default.copyItem(atPath: source + "/" + name, toPath: target + "/" + name)
            } else {
                try FileManager.default.linkItem(atPath: source + "/" + name, toPath: target + "/" + name)
            }
        }
        return target
    }

    private func editModel(_ directory: String, _ model: String, _ edit: (inout [String: Any]) -> Void) throws {
        let path = directory + "/manifest.json"
        var json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as! [String: Any]
        var models = json["models"] as! [String: Any]
        var entry = models[model] as! [String: Any]
        edit(&entry)
        models[model] = entry
        json["models"] = models
        try FileManager.default.removeItem(atPath: path)
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: path))
    }

    private func setPort(_ directory: String, _ model: String, output: Bool, _ port: String, shape: [Any]) throws {
        try editModel(directory, model) { entry in
            let key = output ? "outputs" : "inputs"
            entry[key] = (entry[key] as! [[String: Any]]).map { spec in
                var spec = spec
                if spec["name"] as? String == port { spec["shape"] = shape }
                return spec
            }
        }
    }

    private func openAndWarm(_ directory: String) throws {
        let engine = try MatAnyone2Engine(options: EngineOptions(modelDir: directory), seed: .mask(pixels: [255], width: 1, height: 1))
        _ = try engine.warmUp(width: 64, height: 48)
    }

    private func expectInvalidManifest(_ directory: String, mentioning words: [String]) {
        #expect {
            try openAndWarm(directory)
        } throws: { error in
            guard case let .modelInvalid(path, detail) = error as? EngineError else { return false }
            return path.hasSuffix("manifest.json") && words.allSatisfy { detail.contains($0) }
        }
    }

    /// The decoder's alpha declared at half size: the glue writes the seed at full size into it.
    @Test func manifestShapesTheGlueWritesAreChecked() throws {
        let halfAlpha = try copyOfMatAnyone2Set()
        try setPort(halfAlpha, "decoder", output: true, "alpha", shape: [1, 1, "H/2", "W/2"])
        expectInvalidManifest(halfAlpha, mentioning: ["decoder alpha"])
        let smallUncertainty = try copyOfMatAnyone2Set()
        try setPort(smallUncertainty, "uncert", output: true, "uncert_prob", shape: [1, 1, "H/32", "W/16"])
        expectInvalidManifest(smallUncertainty, mentioning: ["uncert_prob"])
        let unknownSymbol = try copyOfMatAnyone2Set()
        try setPort(unknownSymbol, "encoder", output: true, "key", shape: [1, 64, "H/0", "Q"])
        expectInvalidManifest(unknownSymbol, mentioning: ["unknown dimension", "encoder"])
    }

    @Test func hugeAndNegativeManifestDimensionsAreRefused() throws {
        for shape: [Any] in [[1, 2_147_483_647, "H", "W"], [1, -5, "H", "W"], [1, 0, "H", "W"]] {
            let directory = try copyOfMatAnyone2Set()
            try setPort(directory, "encoder", output: false, "image", shape: shape)
            expectInvalidManifest(directory, mentioning: [])
        }
    }

    @Test func modelFilesCannotLeaveTheirFolder() throws {
        for file in ["../../../etc/passwd", "/etc/passwd", "outside-link.onnx"] {
            let directory = try copyOfMatAnyone2Set()
            if file == "outside-link.onnx" {
                try FileManager.default.createSymbolicLink(atPath: directory + "/" + file, withDestinationPath: "/etc/passwd")
            }
            try editModel(directory, "uncert") { $0["file"] = file }
            expectInvalidManifest(directory, mentioning: ["uncert", file, "outside"])
        }
    }

    @Test func aModelWhoseSha256DisagreesIsRefused() throws {
        let directory = try copyOfMatAnyone2Set()
        try editModel(directory, "uncert") { $0["sha256"] = String(repeating: "0", count: 64) }
        #expect {
            try openAndWarm(directory)
        } throws: { error in
            guard case let .modelInvalid(path, detail) = error as? EngineError else { return false }
            return path.hasSuffix("uncert.onnx") && detail.contains("sha256")
        }
    }

    @Test func aFifoManifestOrModelFailsInsteadOfBlocking() throws {
        let manifestFifo = TestPaths.scratch("fifo-manifest")
        #expect(mkfifo(manifestFifo + "/manifest.json", 0o600) == 0)
        #expect {
            try SegmenterEngine(options: EngineOptions(modelDir: manifestFifo))
        } throws: { error in
            guard case let .modelInvalid(path, detail) = error as? EngineError else { return false }
            return path.hasSuffix("manifest.json") && detail.contains("FIFO")
        }
        let modelFifo = try copyOfMatAnyone2Set()
        try FileManager.default.removeItem(atPath: modelFifo + "/uncert.onnx")
        #expect(mkfifo(modelFifo + "/uncert.onnx", 0o600) == 0)
        #expect {
            try openAndWarm(modelFifo)
        } throws: { error in
            guard case let .modelInvalid(path, detail) = error as? EngineError else { return false }
            return path.hasSuffix("uncert.onnx") && detail.contains("FIFO")
        }
    }

    @Test func anOversizedManifestIsRefusedWithoutReadingIt() throws {
        let directory = TestPaths.scratch("huge-manifest")
        let path = directory + "/manifest.json"
        #expect(FileManager.default.createFile(atPath: path, contents: Data()))
        #expect(truncate(path, 3 << 30) == 0)
        let start = monotonicMs()
        #expect {
            try SegmenterEngine(options: EngineOptions(modelDir: directory))
        } throws: { error in
            guard case let .modelInvalid(_, detail) = error as? EngineError else { return false }
            return detail.contains("larger")
        }
        #expect(monotonicMs() - start < 2000)
    }

    // MARK: Runtime library

    private func runtimeError(_ library: String) -> String? {
        do {
            _ = try SegmenterEngine(options: EngineOptions(modelDir: TestPaths.modelDir, runtimeLibrary: library))
            return nil
        } catch let EngineError.runtimeUnavailable(detail) {
            return detail
        } catch {
            return "wrong error: \(error)"
        }
    }

    @Test func badRuntimeLibrariesAreRefusedBeforeDlopen() throws {
        let directory = TestPaths.scratch("bad-runtime")
        let fifo = directory + "/fifo.so"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(runtimeError(fifo)?.contains("FIFO") == true)
        // A truncated copy of the real library: dlopen would map past the end and die of SIGBUS.
        let real = try #require(try? OnnxRuntime.shared().libraryPath)
        let resolved = URL(fileURLWithPath: real).resolvingSymlinksInPath().path
        let bytes = try Data(contentsOf: URL(fileURLWithPath: resolved))
        for size in [bytes.count / 2, 65536, 10] {
            let cut = directory + "/cut-\(size).so"
            try bytes.prefix(size).write(to: URL(fileURLWithPath: cut))
            let detail = runtimeError(cut)
            #expect(detail?.contains(cut) == true, "\(size): \(detail ?? "accepted")")
        }
        try Data("not a library".utf8).write(to: URL(fileURLWithPath: directory + "/text.so"))
        #expect(runtimeError(directory + "/text.so")?.contains("ELF") == true)
        #expect(runtimeError(directory)?.contains("directory") == true)
    }

    // MARK: Error classification

    @Test func runtimeFailuresAreClassifiedOnceByPhase() {
        let load = RuntimeCallError(call: "CreateSession", message: "protobuf parsing failed", model: "decoder", file: "/m/decoder.onnx")
        #expect(EngineError.classify(load, during: .starting)
            == .modelInvalid(path: "/m/decoder.onnx", detail: "ONNX Runtime cannot load it (protobuf parsing failed). " + setupHint))
        let options = RuntimeCallError(call: "SetIntraOpNumThreads", message: "bad", model: "decoder")
        #expect(EngineError.classify(options, during: .starting) == .runtimeFailure(call: "SetIntraOpNumThreads", detail: "model 'decoder': bad"))
        let run = RuntimeCallError(call: "Run", message: "shape mismatch", model: "decoder")
        #expect(EngineError.classify(run, during: .processing) == .inference(detail: "model 'decoder': Run failed: shape mismatch"))
        #expect(EngineError.classify(EngineError.badSettings(detail: "x"), during: .processing) == .badSettings(detail: "x"))
    }
}

/// Reseeding forgets everything: a reset track seeded again equals a fresh engine's first frame.
@Suite(.serialized) struct ReseedTests {
    @Test func aReseedEqualsAFreshStart() throws {
        let frames = try TestPaths.frames("test-sample2-512x288.bgra", width: 512, height: 288)
        let maskA = try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray")))
        let maskB = (0..<(512 * 288)).map { UInt8(($0 % 512) < 200 ? 255 : 0) }
        var parameters = MatAnyone2Parameters()
        parameters.warmup = 0
        func matte(_ engine: MatAnyone2Engine, _ frame: [UInt8]) throws -> [UInt8] {
            var alpha = [UInt8](repeating: 0, count: 512 * 288)
            var report = FrameReport(modelCount: engine.modelNames.count)
            try frame.withUnsafeBufferPointer { pixels in
                try alpha.withUnsafeMutableBufferPointer { plane in
                    try engine.matte(BGRAImage(base: pixels.baseAddress!, width: 512, height: 288, stride: 2048),
                                     into: GrayImage(base: plane.baseAddress!, width: 512, height: 288, stride: 512), report: &report)
                }
            }
            return alpha
        }
        let options = EngineOptions(modelDir: TestPaths.modelDir)
        let fresh = try MatAnyone2Engine(options: options, parameters: parameters, seed: .mask(pixels: maskB, width: 512, height: 288))
        _ = try fresh.warmUp(width: 512, height: 288)
        let expected = try matte(fresh, frames[0])
        let tracked = try MatAnyone2Engine(options: options, parameters: parameters, seed: .mask(pixels: maskA, width: 512, height: 288))
        _ = try tracked.warmUp(width: 512, height: 288)
        let first = try matte(tracked, frames[0])
        for _ in 0..<6 { _ = try matte(tracked, frames[0]) }
        tracked.replaceSeed(.mask(pixels: maskB, width: 512, height: 288))
        _ = try matte(tracked, frames[0])
        tracked.reseed(nil)
        let reseeded = try matte(tracked, frames[0])
        let difference = zip(reseeded, expected).map { abs(Int($0) - Int($1)) }.max() ?? 0
        #expect(zip(first, expected).map { abs(Int($0) - Int($1)) }.max()! > 8, "masks A and B must seed differently")
        #expect(difference <= 1, "a reseed differs from a fresh start by \(difference) levels")
    }
}

/// The segmenter's temporal filter: still picture → the matte settles; moving picture → it follows.
struct TemporalFilterTests {
    @Test func stillPicturesAreSmoothedMovingOnesFollowAtOnce() {
        let filter = TemporalFilter(width: 8, height: 8, strength: 0.5)
        var still: (Int) -> (Float, Float, Float) = { _ in (0.5, 0.5, 0.5) }
        var values = [Float](repeating: 0.2, count: 64)
        filter.apply(&values, rgb: still)
        #expect(values.allSatisfy { $0 == 0.2 })  // the first frame passes as it is
        // The model flickers to 0.8 on a still picture: the matte moves half way.
        values = [Float](repeating: 0.8, count: 64)
        filter.apply(&values, rgb: still)
        #expect(values.allSatisfy { abs($0 - 0.5) < 1e-6 })
        // The picture changes (a person moves in): the matte follows at once.
        still = { _ in (0.9, 0.9, 0.9) }
        values = [Float](repeating: 1, count: 64)
        filter.apply(&values, rgb: still)
        #expect(values.allSatisfy { abs($0 - 1) < 1e-6 })
        filter.reset()
        values = [Float](repeating: 0.1, count: 64)
        filter.apply(&values, rgb: still)
        #expect(values.allSatisfy { $0 == 0.1 })
    }
}
