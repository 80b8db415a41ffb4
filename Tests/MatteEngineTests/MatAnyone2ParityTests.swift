import Foundation
import Testing
@testable import MatteEngine

/// The Swift engine against upstream PyTorch MatAnyone2 (fp32, autocast off) on the same frames,
/// with the random-init model set that scripts/test.sh exports (the reference comes from
/// tools/matanyone2/reference.py with the same seed).
@Suite(.serialized) struct MatAnyone2ParityTests {
    static let width = 512, height = 288

    /// float32 [T, H, W] from a .npy file (little-endian, C order).
    static func loadNpy(_ path: String) throws -> [Float] {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let headerLength = Int(data[8]) | Int(data[9]) << 8
        let payload = data.subdata(in: (10 + headerLength)..<data.count)
        return payload.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
    }

    @Test func everyFrameMatchesUpstream() throws {
        let referencePath = TestData.dataDir + "/matanyone2-reference.npy"
        let reference = try MatAnyone2ParityTests.loadNpy(referencePath)
        let frameSize = Self.width * Self.height
        let count = reference.count / frameSize
        #expect(count >= 30, "reference has \(count) frames")
        let frames = try TestData.frames("test-sample2-512x288.bgra", width: Self.width, height: Self.height)
        let mask = try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestData.dataDir + "/test-sample2-mask-512x288.gray")))
        let engine = try MatAnyone2Engine(options: EngineOptions(modelDir: TestData.modelDir),
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
            #expect(maximum <= 2e-3, "frame \(index): max |Δ| \(maximum)")
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
        let seed = SeedMask.prepare(mask, width: width, height: height)
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
            try MatAnyone2Engine(options: EngineOptions(modelDir: TestData.modelDir), parameters: parameters,
                                 seed: .mask(pixels: [255], width: 1, height: 1))
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("mem-every")
        }
    }

    @Test func aSegmenterSetIsNotAMatAnyone2Set() {
        let directory = ModelLocations.engineDir(modelDir: TestData.modelDir, engine: "segmenter")
        #expect {
            try MatAnyone2Engine(options: EngineOptions(modelDir: directory), seed: .mask(pixels: [255], width: 1, height: 1))
        } throws: { error in
            if case .modelMissing = error as? EngineError { return true }
            if case .modelInvalid = error as? EngineError { return true }
            return false
        }
    }
}
