import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import MatteEngine
import TestPaths

/// mode=async shows the picture at once (issue: a live MatAnyone2 async pipeline showed its first
/// frame ~4 s after PLAYING, models loading and warming up on the streaming thread): models load on
/// the inference thread, and frames leave meanwhile with `no-person-alpha`.
@Suite(.serialized) struct AsyncPreviewTests {
    /// Seconds from PLAYING to the first buffer at `appsink name=out`, and that buffer's bytes.
    func firstFrame(_ description: String, timeout: Double = 30) -> (seconds: Double, bytes: [UInt8])? {
        precondition(gstreamerReady)
        guard let pipeline = gst_parse_launch(description, nil) else { return nil }
        EngineWrappers.inject(into: pipeline)
        defer {
            gst_element_set_state(pipeline, GST_STATE_NULL)
            gst_object_unref(pipeline)
        }
        let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
        let sinkElement = gst_bin_get_by_name(bin, "out")!
        defer { gst_object_unref(sinkElement) }
        let sink = UnsafeMutableRawPointer(sinkElement).assumingMemoryBound(to: GstAppSink.self)
        let start = monotonicMs()
        gst_element_set_state(pipeline, GST_STATE_PLAYING)
        guard let sample = gst_app_sink_try_pull_sample(sink, GstClockTime(timeout * 1e9)) else { return nil }
        defer { gst_sample_unref(sample) }
        let seconds = (monotonicMs() - start) / 1000
        var map = GstMapInfo()
        let buffer = gst_sample_get_buffer(sample)!
        guard gst_buffer_map(buffer, &map, GST_MAP_READ) != 0 else { return nil }
        defer { gst_buffer_unmap(buffer, &map) }
        return (seconds, Array(UnsafeBufferPointer(start: map.data, count: Int(map.size))))
    }

    /// An engine that takes 3 s to load: the first frame leaves long before, wearing no-person-alpha.
    @Test func theFirstFrameLeavesWhileModelsLoad() throws {
        precondition(gstreamerReady)
        EngineWrappers.set({ engine in
            Thread.sleep(forTimeInterval: 3)  // loading
            return engine
        }, forElementNamed: "preview")
        defer { EngineWrappers.set(nil, forElementNamed: "preview") }
        let source = "videotestsrc is-live=true ! video/x-raw,format=BGRA,width=320,height=180,framerate=30/1"
        // (stats-interval=1: the stats of frames that leave meanwhile must not wait for the engine either.)
        let first = try #require(firstFrame("\(source) ! \(TestPaths.element) name=preview mode=async no-person-alpha=7 stats-interval=1 "
                                            + "! video/x-raw,format=GRAY8 ! appsink name=out sync=false"))
        // Today's 0.3 s target is for an idle 2-core machine (see the README); 1.5 s leaves room for a
        // loaded CI machine and still fails if loading (3 s) holds the stream.
        #expect(first.seconds < 1.5, "first frame after \(first.seconds) s")
        #expect(first.bytes.count == 320 * 180 && first.bytes.allSatisfy { $0 == 7 }, "the first frame's alpha is not no-person-alpha")
        // Sync mode still loads before the first frame (files want every frame matted).
        EngineWrappers.set({ engine in
            Thread.sleep(forTimeInterval: 1)
            return engine
        }, forElementNamed: "preview")
        let sync = try #require(firstFrame("\(source) ! \(TestPaths.element) name=preview "
                                           + "! video/x-raw,format=GRAY8 ! appsink name=out sync=false"))
        #expect(sync.seconds >= 1)
    }

    /// A load failure on the inference thread still reaches the bus, once, with today's domain and
    /// code, and the pipeline stops.
    @Test func aLoadFailureInAsyncModeIsReportedOnceAndStops() throws {
        let run = runPipeline("videotestsrc is-live=true num-buffers=300 ! video/x-raw,format=BGRA,width=160,height=96,framerate=30/1 "
                              + "! matanyone name=broken mode=async model-dir=/nonexistent/models ! fakesink", timeout: 30)
        let error = try #require(run.error)
        #expect(error.domain == "gst-resource-error-quark")
        #expect(error.code == Int32(GST_RESOURCE_ERROR_NOT_FOUND.rawValue))
        #expect(error.message.contains("/nonexistent/models") && error.message.contains("scripts/setup.sh"))
        #expect(!run.reachedEOS)
    }
}
