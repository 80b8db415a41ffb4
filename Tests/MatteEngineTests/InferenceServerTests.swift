import Foundation
import Testing
@testable import MatteEngine
import MattePixels
import TestPaths

/// MatAnyone2 on the real Triton Inference Server that `scripts/test.sh` starts (tools/serve, the
/// random-init test set), against the same networks in this process.
@Suite(.serialized) struct InferenceServerTests {
    static let width = 512, height = 288

    static func server() throws -> String {
        let url = ProcessInfo.processInfo.environment["MATANYONE_TEST_SERVER"]
        return try #require(url, "MATANYONE_TEST_SERVER is not set: scripts/test.sh starts the test server and sets it")
    }

    static func options(server: String?, configure: (inout ServerOptions) -> Void = { _ in }) -> EngineOptions {
        var options = EngineOptions(modelDir: TestPaths.modelDir)
        if let server {
            var remote = ServerOptions(url: server)
            configure(&remote)
            options.server = remote
        }
        return options
    }

    static func mask() throws -> SeedSource {
        let path = TestPaths.dataDir + "/test-sample2-mask-\(width)x\(height).gray"
        let pixels = try #require(FileManager.default.contents(atPath: path), "missing \(path): run scripts/test.sh")
        return .mask(pixels: Array(pixels), width: width, height: height)
    }

    /// Each frame's alpha as the element would write it (frame size, 8 bits), and the reports.
    static func mattes(_ engine: MatAnyone2Engine, _ frames: [[UInt8]], width: Int = width, height: Int = height)
        throws -> (alphas: [[UInt8]], reports: [FrameReport]) {
        var alphas: [[UInt8]] = [], reports: [FrameReport] = []
        for frame in frames {
            var plane = [UInt8](repeating: 0, count: width * height)
            var report = FrameReport(modelCount: engine.modelNames.count)
            try frame.withUnsafeBufferPointer { pixels in
                try plane.withUnsafeMutableBufferPointer { alpha in
                    try engine.matte(BGRAImage(base: pixels.baseAddress!, width: width, height: height, stride: width * 4),
                                     into: GrayImage(base: alpha.baseAddress!, width: width, height: height, stride: width),
                                     report: &report)
                }
            }
            alphas.append(plane)
            reports.append(report)
        }
        return (alphas, reports)
    }

    static func largestDifference(_ a: [[UInt8]], _ b: [[UInt8]]) -> Int {
        zip(a, b).map { zip($0, $1).map { abs(Int($0) - Int($1)) }.max() ?? 0 }.max() ?? 0
    }

    /// Every frame of the dancer within 1 LSB of the in-process engine, over HTTP and over shared
    /// memory, at the frame's own size (8-bit frames) and scaled to a working size (float inputs the
    /// wire must carry exactly).
    @Test(arguments: [(288, SharedMemoryUse.off), (288, .on), (144, .off)])
    func parityWithTheInProcessEngine(workingSize: Int, sharing: SharedMemoryUse) throws {
        let frames = Array(try TestPaths.frames("test-sample2-\(Self.width)x\(Self.height).bgra", width: Self.width, height: Self.height).prefix(24))
        let local = try MatAnyone2Engine(options: Self.options(server: nil), workingShortSide: workingSize, seed: Self.mask())
        let remote = try MatAnyone2Engine(options: Self.options(server: try Self.server()) { $0.sharedMemory = sharing },
                                          workingShortSide: workingSize, seed: Self.mask())
        #expect(remote.server != nil && local.server == nil)
        let here = try Self.mattes(local, frames), there = try Self.mattes(remote, frames)
        let worst = Self.largestDifference(here.alphas, there.alphas)
        print("server parity at working size \(workingSize), shared memory \(sharing): largest |Δα| \(worst) levels over \(frames.count) frames")
        #expect(worst <= 1)
        #expect(here.alphas[5] != here.alphas[20], "the alphas follow the dancer")
        for (index, report) in there.reports.enumerated() {
            let timing = try #require(report.server, "frame \(index): no server timing")
            #expect(timing.requests == 1 && timing.roundTripMs >= timing.computeMs && timing.computeMs > 0)
            #expect(timing.sharedMemory == (sharing == .on))
            let (w, h) = MatAnyone2Engine.workingSize(width: Self.width, height: Self.height, shortSide: workingSize)
            if sharing == .off {
                // The frame (float32 planes) up, the alpha (8 bits) and the uncertainty down, and headers.
                #expect(timing.bytesSent >= 3 * w * h * 4 && timing.bytesSent < 3 * w * h * 4 + 4096 + (index == 0 ? w * h : 0))
                #expect(timing.bytesReceived >= w * h && timing.bytesReceived < w * h + 8192)
            } else {
                #expect(timing.bytesSent < 4096 && timing.bytesReceived < 4096)
            }
            #expect(report.memoryFrames == there.reports[index].memoryFrames && report.memoryFrames == here.reports[index].memoryFrames)
        }
        #expect(there.reports.last!.modelMs[0] > 0, "the server's encoder time reaches the report")
    }
}
