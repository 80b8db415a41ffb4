import Foundation
import Testing
@testable import MatteEngine
import TestPaths
import MattePixels

/// The Swift engine against upstream PyTorch MatAnyone2 (fp32, autocast off) on the same frames,
/// with the random-init model set that scripts/test.sh exports (the reference comes from
/// tools/matanyone2/reference.py with the same seed).
@Suite(.serialized) struct MatAnyone2ParityTests {
    static let width = 512, height = 288

    @Test func everyFrameMatchesUpstream() throws {
        let reference = try TestPaths.loadNpy("matanyone2-reference.npy")
        let frameSize = Self.width * Self.height
        let count = reference.count / frameSize
        #expect(count >= 30, "reference has \(count) frames")
        let frames = try TestPaths.frames("test-sample2-512x288.bgra", width: Self.width, height: Self.height)
        let mask = try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray")))
        let engine = try MatAnyone2Engine(options: EngineOptions(modelDir: TestPaths.modelDir),
                                          seed: .mask(pixels: mask, width: Self.width, height: Self.height))
        var alphaPlane = [UInt8](repeating: 0, count: frameSize)
        var report = FrameReport(modelCount: engine.modelNames.count)
        var worstMax = 0.0, worstMean = 0.0
        var memoryFramesSeen: [Int] = []
        for index in 0..<count {
            report.clear()
            try frames[index].withUnsafeBufferPointer { pixels in
                try alphaPlane.withUnsafeMutableBufferPointer { plane in
                    try engine.matte(BGRAImage(base: pixels.baseAddress!, width: Self.width, height: Self.height, stride: Self.width * 4),
                                     into: GrayImage(base: plane.baseAddress!, width: Self.width, height: Self.height, stride: Self.width),
                                     report: &report)
                }
            }
            #expect(report.seeded)
            memoryFramesSeen.append(report.memoryFrames)
            let ours = try #require(engine.workingAlpha())
            #expect(ours.width == Self.width && ours.height == Self.height)
            var maximum = 0.0, total = 0.0
            for pixel in 0..<frameSize {
                let difference = Double(abs(ours.alpha[pixel] - reference[index * frameSize + pixel]))
                maximum = max(maximum, difference)
                total += difference
            }
            let mean = total / Double(frameSize)
            #expect(maximum <= 1e-3, "frame \(index): max |Δ| \(maximum)")
            #expect(mean <= 1e-4, "frame \(index): mean |Δ| \(mean)")
            worstMax = max(worstMax, maximum)
            worstMean = max(worstMean, mean)
        }
        print("MatAnyone2 parity over \(count) frames: worst max |Δ| \(worstMax), worst mean |Δ| \(worstMean)")
        // Memory frames every 5: 1 (permanent) … 5, then FIFO eviction keeps it at 5.
        #expect(memoryFramesSeen.max() == 5)
        #expect(memoryFramesSeen.last == 5)
        // The reference itself must be a real matte, not a constant.
        let first = reference[0..<frameSize]
        #expect(first.contains { $0 > 0.6 } && first.contains { $0 < 0.4 })
    }

    /// The fp16 set scripts/test.sh makes with tools/matanyone2/fp16.py (meant for GPUs; the CPU
    /// provider runs it through casts): it loads as fp16, really differs from fp32, and stays close.
    @Test func fp16SetStaysCloseToFp32() throws {
        let frameSize = Self.width * Self.height
        let frames = try TestPaths.frames("test-sample2-512x288.bgra", width: Self.width, height: Self.height)
        let mask = try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray")))
        func run(_ precision: ModelPrecision) throws -> [[Float]] {
            var parameters = MatAnyone2Parameters()
            parameters.warmup = 2
            let engine = try MatAnyone2Engine(options: EngineOptions(modelDir: TestPaths.modelDir, precision: precision),
                                              parameters: parameters, seed: .mask(pixels: mask, width: Self.width, height: Self.height))
            #expect(engine.precision == precision)
            return try workingAlphas(engine, Array(frames.prefix(6)), width: Self.width, height: Self.height)
        }
        let exact = try run(.fp32), half = try run(.fp16)
        var worstMean = 0.0, maximum = 0.0
        for (a, b) in zip(exact, half) {
            let differences = zip(a, b).map { Double(abs($0 - $1)) }
            worstMean = max(worstMean, differences.reduce(0, +) / Double(frameSize))
            maximum = max(maximum, differences.max()!)
        }
        print("MatAnyone2 fp16 vs fp32 over \(exact.count) frames: worst mean |Δ| \(worstMean), max |Δ| \(maximum)")
        #expect(maximum > 1e-5, "fp16 output identical to fp32: the fp16 set was not loaded")
        // The converter measured mean 0.0011–0.0013, max ≤ 0.0099 on these frames; 3× margin.
        #expect(worstMean < 0.004 && maximum < 0.03)
    }

    /// The int8 set scripts/test.sh makes with tools/matanyone2/quantize.py: it loads, really is a
    /// different (quantized) set, and stays near fp32 on the same frames.
    @Test func int8SetStaysNearFp32() throws {
        let frameSize = Self.width * Self.height
        let frames = try TestPaths.frames("test-sample2-512x288.bgra", width: Self.width, height: Self.height)
        let mask = try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray")))
        func run(_ precision: ModelPrecision) throws -> [[Float]] {
            let engine = try MatAnyone2Engine(options: EngineOptions(modelDir: TestPaths.modelDir, precision: precision),
                                              seed: .mask(pixels: mask, width: Self.width, height: Self.height))
            return try workingAlphas(engine, Array(frames.prefix(8)), width: Self.width, height: Self.height)
        }
        let int8Dir = ModelLocations.matAnyone2Dir(modelDir: TestPaths.modelDir, precision: .int8)
        #expect(try ModelManifest.load(directory: int8Dir).precision == .int8)
        let exact = try run(.fp32), quantized = try run(.int8)
        var worstMean = 0.0, maximum = 0.0, worstIoU = 1.0
        for (a, b) in zip(exact, quantized) {
            var total = 0.0, both = 0, either = 0
            for pixel in 0..<frameSize {
                let difference = Double(abs(a[pixel] - b[pixel]))
                total += difference
                maximum = max(maximum, difference)
                let inA = a[pixel] > 0.5, inB = b[pixel] > 0.5
                both += inA && inB ? 1 : 0
                either += inA || inB ? 1 : 0
            }
            worstMean = max(worstMean, total / Double(frameSize))
            worstIoU = min(worstIoU, either == 0 ? 1 : Double(both) / Double(either))
        }
        print("MatAnyone2 int8 vs fp32 over \(exact.count) frames: worst mean |Δ| \(worstMean), max |Δ| \(maximum), worst IoU \(worstIoU)")
        #expect(maximum > 1e-3, "int8 output identical to fp32: the int8 set was not loaded")
        #expect(worstMean < 0.1)
        #expect(worstIoU > 0.8)
    }

    /// A MatAnyone2 engine on `modelDir` at `precision`, seeded with a trivial mask (for the errors its init throws).
    private func openEngine(modelDir: String, precision: ModelPrecision) throws -> MatAnyone2Engine {
        try MatAnyone2Engine(options: EngineOptions(modelDir: modelDir, precision: precision),
                             seed: .mask(pixels: [255], width: 1, height: 1))
    }

    @Test func missingInt8SetSaysHowToMakeIt() throws {
        let directory = TestPaths.scratch("no-int8")
        let fp32 = ModelLocations.matAnyone2Dir(modelDir: TestPaths.modelDir, precision: .fp32)
        try FileManager.default.createSymbolicLink(atPath: directory + "/matanyone2", withDestinationPath: fp32)
        #expect {
            try openEngine(modelDir: directory, precision: .int8)
        } throws: { error in
            guard case let .modelMissing(path, hint) = error as? EngineError else { return false }
            return path.hasSuffix("matanyone2-int8") && hint.contains("tools.matanyone2.quantize")
        }
        // An fp32 set named where the int8 one belongs is refused, not run as int8.
        try FileManager.default.createSymbolicLink(atPath: directory + "/matanyone2-int8", withDestinationPath: fp32)
        #expect {
            try openEngine(modelDir: directory, precision: .int8)
        } throws: { error in
            guard case let .modelInvalid(_, detail) = error as? EngineError else { return false }
            return detail.contains("fp32 set")
        }
        // model-dir pointing straight at the int8 set, run as fp32: refused, naming what it holds.
        let int8Set = ModelLocations.matAnyone2Dir(modelDir: TestPaths.modelDir, precision: .int8)
        #expect {
            try openEngine(modelDir: int8Set, precision: .fp32)
        } throws: { error in
            guard case let .modelInvalid(_, detail) = error as? EngineError else { return false }
            return detail.contains("int8 set") && detail.contains("precision=fp32")
        }
    }

    @Test func workingSizeKeepsAspectWithShortSide288() {
        #expect(MatAnyone2Engine.workingSize(width: 1920, height: 1080, shortSide: 288) == (512, 288))
        #expect(MatAnyone2Engine.workingSize(width: 1080, height: 1920, shortSide: 288) == (288, 512))
        #expect(MatAnyone2Engine.workingSize(width: 512, height: 288, shortSide: 288) == (512, 288))
        #expect(MatAnyone2Engine.workingSize(width: 720, height: 528, shortSide: 288) == (400, 288))
        #expect(MatAnyone2Engine.workingSize(width: 640, height: 480, shortSide: 0) == (640, 480))
    }

    @Test func seedMaskIsClosedLikeUpstream() {
        // A 1-pixel gap in a bar is closed by dilate+erode; an isolated far pixel survives as a blob.
        let width = 40, height = 20
        var mask = [UInt8](repeating: 0, count: width * height)
        for y in 8..<12 { for x in 5..<35 where x != 20 { mask[y * width + x] = 255 } }
        let seed = SeedMask.prepare(mask.map { Float($0) / 255 }, width: width, height: height)
        #expect(seed[10 * width + 20] == 1)
        #expect(seed[10 * width + 10] == 1)
        #expect(seed[0] == 0 && seed[19 * width + 39] == 0)
        #expect(seed.allSatisfy { $0 == 0 || $0 == 1 })
        // The 10×10 ellipse has OpenCV's row pattern.
        let kernel = SeedMask.ellipse(10).map { $0.map { $0 ? "1" : "0" }.joined() }
        #expect(kernel == ["0000010000", "0011111110", "0111111111", "1111111111", "1111111111", "1111111111",
                           "1111111111", "1111111111", "0111111111", "0011111110"])
    }

    @Test func badSettingsAreRefused() {
        var parameters = MatAnyone2Parameters()
        parameters.memEvery = 0
        #expect {
            try MatAnyone2Engine(options: EngineOptions(modelDir: TestPaths.modelDir), parameters: parameters,
                                 seed: .mask(pixels: [255], width: 1, height: 1))
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("mem-every")
        }
    }

    @Test func aSegmenterSetIsNotAMatAnyone2Set() {
        let directory = ModelLocations.engineDir(modelDir: TestPaths.modelDir, engine: "segmenter")
        #expect {
            try openEngine(modelDir: directory, precision: .fp32)
        } throws: { error in
            guard case let .modelMissing(path, _) = error as? EngineError else { return false }
            return path == directory + "/matanyone2"
        }
    }
}
