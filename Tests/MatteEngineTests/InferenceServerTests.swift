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
        // (Every test frame over HTTP at the clip's working size; 24 for the other two.)
        let all = try TestPaths.frames("test-sample2-\(Self.width)x\(Self.height).bgra", width: Self.width, height: Self.height)
        let frames = Array(all.prefix(workingSize == 288 && sharing == .off ? all.count : 24))
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

extension InferenceServerTests {
    /// Two people (two slots of one stream, one encoding a frame) as in this process.
    @Test func twoPeopleAsInProcess() throws {
        let frames = Array(try TestPaths.frames("test-sample2-\(Self.width)x\(Self.height).bgra", width: Self.width, height: Self.height).prefix(8))
        // Two people: the dancer's mask, and a box beside her (grey levels label people in a mask).
        let path = TestPaths.dataDir + "/test-sample2-mask-\(Self.width)x\(Self.height).gray"
        var pixels = Array(try #require(FileManager.default.contents(atPath: path)))
        for y in 20..<80 { for x in 400..<480 { pixels[y * Self.width + x] = 128 } }
        var parameters = MatAnyone2Parameters()
        parameters.maxPeople = 2
        let seed = SeedSource.mask(pixels: pixels, width: Self.width, height: Self.height)
        let local = try MatAnyone2Engine(options: Self.options(server: nil), parameters: parameters, workingShortSide: 144, seed: seed)
        let remote = try MatAnyone2Engine(options: Self.options(server: try Self.server()), parameters: parameters,
                                          workingShortSide: 144, seed: seed)
        let here = try Self.mattes(local, frames), there = try Self.mattes(remote, frames)
        #expect(there.reports.allSatisfy { $0.people == 2 } && here.reports.allSatisfy { $0.people == 2 })
        #expect(Self.largestDifference(here.alphas, there.alphas) <= 1)
    }

    /// The 8-bit frame: a quarter of the bytes up; its mattes follow the same dancer.
    @Test func eightBitFramesCarryAQuarterOfTheBytes() throws {
        let frames = Array(try TestPaths.frames("test-sample2-\(Self.width)x\(Self.height).bgra", width: Self.width, height: Self.height).prefix(4))
        // (Frames at their working size hold 8-bit values: both formats carry them exactly. Scaled
        // frames do not, and random weights magnify the rounding: see the README.)
        let float = try MatAnyone2Engine(options: Self.options(server: try Self.server()) { $0.sharedMemory = .off },
                                         workingShortSide: 288, seed: Self.mask())
        let bytes = try MatAnyone2Engine(options: Self.options(server: try Self.server()) { $0.sharedMemory = .off; $0.frameFormat = .uint8 },
                                         workingShortSide: 288, seed: Self.mask())
        let a = try Self.mattes(float, frames), b = try Self.mattes(bytes, frames)
        let saved = a.reports.last!.server!.bytesSent - b.reports.last!.server!.bytesSent
        // float32 sends 4 bytes a value, uint8 one (the headers differ by a few bytes: FRAME_U8, UINT8).
        #expect(abs(saved - 3 * Self.width * Self.height * 3) < 16)
        #expect(Self.largestDifference(a.alphas, b.alphas) <= 1)
    }

    /// A server that is not there: an error naming it (files), or frames without a matte and one notice (live).
    @Test func anAbsentServer() throws {
        let socket = unusedPort()
        let url = "http://127.0.0.1:\(socket)"
        #expect {
            _ = try MatAnyone2Engine(options: Self.options(server: url), seed: Self.mask())
        } throws: { error in
            guard case let EngineError.serverUnavailable(reported, detail)? = error as? EngineError else { return false }
            return reported == url && detail.contains("mode=async")
        }
        let engine = try MatAnyone2Engine(options: Self.options(server: url) { $0.waitForServer = true }, seed: Self.mask())
        let frames = Array(try TestPaths.frames("test-sample2-\(Self.width)x\(Self.height).bgra", width: Self.width, height: Self.height).prefix(3))
        let result = try Self.mattes(engine, frames)
        #expect(result.alphas.allSatisfy { $0.allSatisfy { $0 == 255 } }, "no-person-alpha while the server is away")
        let notices = result.reports.flatMap(\.notices)
        #expect(notices.count == 1)
        if case .serverLost(url, _)? = notices.first {} else { Issue.record("expected one serverLost notice, got \(notices)") }
        #expect(result.reports.allSatisfy { !$0.seeded })
    }

    /// Settings the client refuses before any connection, each naming the fix.
    @Test(arguments: [
        ("ftp://host:1", "is not an http or https URL"), ("http://user:secret@host:1", "credentials"),
        ("http://host:1/?x=1", "query"), ("http://:1", "names no host"),
    ])
    func badServerAddresses(url: String, says: String) throws {
        #expect {
            _ = try MatAnyone2Engine(options: Self.options(server: url), seed: Self.mask())
        } throws: { error in
            guard case let EngineError.badSettings(detail)? = error as? EngineError else { return false }
            return detail.contains(says) && !detail.contains("secret")
        }
    }

    @Test func aMissingTokenFileAndAnUnknownModel() throws {
        #expect {
            _ = try MatAnyone2Engine(options: Self.options(server: try Self.server()) { $0.tokenFile = "/nonexistent/token" }, seed: Self.mask())
        } throws: { error in
            if case EngineError.fileMissing(path: "/nonexistent/token", _)? = error as? EngineError { return true }
            return false
        }
        #expect {
            _ = try MatAnyone2Engine(options: Self.options(server: try Self.server()) { $0.model = "nosuchmodel" }, seed: Self.mask())
        } throws: { error in
            if case let EngineError.modelMissing(path, _)? = error as? EngineError { return path.hasSuffix("/v2/models/nosuchmodel") }
            return false
        }
    }
}

/// A TCP port nothing listens on (bound, then released).
private func unusedPort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return Int(UInt16(bigEndian: address.sin_port))
}
