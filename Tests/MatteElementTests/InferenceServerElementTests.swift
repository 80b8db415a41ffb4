import CGStreamer
import Foundation
import Testing
import TestPaths

/// The element with `inference-server` in pipelines run in-process, against the Triton server
/// `scripts/test.sh` starts (MATANYONE_TEST_SERVER): what reaches the bus.
@Suite(.serialized) struct InferenceServerElementTests {
    static func server() throws -> String {
        try #require(ProcessInfo.processInfo.environment["MATANYONE_TEST_SERVER"],
                     "MATANYONE_TEST_SERVER is not set: scripts/test.sh starts the test server and sets it")
    }

    static let mask = TestPaths.dataDir + "/test-sample2-mask-512x288.png"
    static let source = "videotestsrc num-buffers=6 ! video/x-raw,format=BGRA,width=256,height=144,framerate=30/1"

    static func element(_ server: String, _ extra: String = "") -> String {
        "matanyone engine=matanyone2 precision=fp32 model-dir=\"\(TestPaths.modelDir)\" seed=mask seed-mask=\"\(mask)\" working-size=144 "
            + "inference-server=\(server) stats-interval=1 \(extra)"
    }

    /// Every frame matted on the server; the stats say where and what it cost.
    @Test func statsCarryTheServersShare() throws {
        let server = try Self.server()
        let run = runPipeline("\(Self.source) ! \(Self.element(server, "server-shared-memory=off")) ! fakesink", timeout: 120)
        #expect(run.error == nil, "\(String(describing: run.error))")
        #expect(run.reachedEOS)
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(stats.count == 6)
        for row in stats {
            #expect(row["provider"] == "server" && row["server"] == server && row["data"] == "server")
            #expect(row["server-transport"] == "http" && row["seeded"] == "true")
            let roundTrip = Double(row["server-ms"] ?? "") ?? -1, compute = Double(row["server-compute-ms"] ?? "") ?? -1
            #expect(compute > 0 && roundTrip >= compute)
            #expect((Int(row["server-bytes-sent"] ?? "") ?? 0) >= 3 * 256 * 144 * 4)
        }
    }

    /// No server at start in sync mode: RESOURCE/OPEN_READ_WRITE naming it, before any frame.
    @Test func anAbsentServerStopsASyncPipeline() throws {
        let run = runPipeline("\(Self.source) ! \(Self.element("http://127.0.0.1:9")) ! fakesink", timeout: 60)
        let error = try #require(run.error)
        #expect(error.domain == "gst-resource-error-quark")
        #expect(error.code == Int32(GST_RESOURCE_ERROR_OPEN_READ_WRITE.rawValue))
        #expect(error.message.contains("http://127.0.0.1:9") && error.message.contains("mode=async"))
        #expect(run.elementMessages.filter { $0["name"] == "matanyone-stats" }.isEmpty)
    }

    /// A bad address is a settings error; a token file that is not there, NOT_FOUND.
    @Test func badSettingsAreNamed() throws {
        let bad = runPipeline("\(Self.source) ! \(Self.element("ftp://127.0.0.1:9")) ! fakesink", timeout: 60)
        let error = try #require(bad.error)
        #expect(error.domain == "gst-library-error-quark" && error.code == Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
        let token = runPipeline("\(Self.source) ! \(Self.element(try Self.server(), "server-token-file=/nonexistent/token")) ! fakesink",
                                timeout: 60)
        let missing = try #require(token.error)
        #expect(missing.domain == "gst-resource-error-quark" && missing.code == Int32(GST_RESOURCE_ERROR_NOT_FOUND.rawValue))
    }

    /// In async mode a server that is not there is a warning: frames flow with no-person-alpha.
    @Test func anAbsentServerInAsyncModeIsAWarning() throws {
        let run = runPipeline("videotestsrc is-live=true num-buffers=15 ! video/x-raw,format=BGRA,width=256,height=144,framerate=30/1 "
                              + "! \(Self.element("http://127.0.0.1:9", "mode=async")) ! video/x-raw,format=GRAY8 "
                              + "! appsink name=out sync=false", timeout: 60)
        #expect(run.error == nil && run.reachedEOS)
        #expect(run.warnings.filter { $0.contains("does not answer") }.count == 1)
        #expect(run.samples.count == 15 && run.samples.allSatisfy { $0.allSatisfy { $0 == 255 } })
    }
}
