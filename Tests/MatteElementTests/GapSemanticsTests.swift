import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import TestPaths

/// When MatAnyone2's track survives and when it starts over (issue: a leaky queue's DISCONT reset
/// the tracker on every frame). A frame "seeded" when its stats carry seed-ms.
@Suite(.serialized) struct GapSemanticsTests {
    /// A harnessed MatAnyone2 element (seeded from the test mask, small working size) fed copies of
    /// one real frame; its stats messages are read off a bus.
    final class Track {
        let harness: UnsafeMutablePointer<GstHarness>
        let bus: UnsafeMutablePointer<GstBus>
        let frame: [UInt8]
        var caps = "video/x-raw,format=BGRA,width=512,height=288,framerate=25/1"

        init(_ extra: String = "") throws {
            precondition(gstreamerReady)
            let data = TestPaths.dataDir
            harness = gst_harness_new_parse("matanyone engine=matanyone2 precision=fp32 model-dir=\"\(TestPaths.modelDir)\" warmup=0 "
                                            + "working-size=144 mem-every=2 seed=mask "
                                            + "seed-mask=\"\(data)/test-sample2-mask-512x288.png\" stats-interval=1 \(extra)")!
            bus = gst_bus_new()!
            gst_element_set_bus(harness.pointee.element, bus)
            let frames = try Data(contentsOf: URL(fileURLWithPath: "\(data)/test-sample2-512x288.bgra"))
            frame = [UInt8](frames.prefix(512 * 288 * 4))
            gst_harness_set_src_caps_str(harness, caps)
            gst_harness_set_sink_caps_str(harness, "video/x-raw,format=GRAY8")
        }

        deinit {
            gst_harness_teardown(harness)
            gst_object_unref(bus)
        }

        /// Pushes one frame at `ms` of stream time; returns (seeded on this frame, memory frames).
        @discardableResult
        func push(ms: Int, discont: Bool = false, width: Int = 512, height: Int = 288) -> (seeded: Bool, memoryFrames: Int) {
            var bytes = frame
            if width != 512 || height != 288 { bytes = [UInt8](repeating: 120, count: width * height * 4) }
            let buffer = gst_buffer_new_allocate(nil, gsize(bytes.count), nil)!
            _ = bytes.withUnsafeBufferPointer { gst_buffer_fill(buffer, 0, $0.baseAddress, gsize($0.count)) }
            buffer.pointee.pts = GstClockTime(ms) * 1_000_000
            buffer.pointee.duration = 40_000_000
            if discont { buffer.pointee.mini_object.flags |= GST_BUFFER_FLAG_DISCONT.rawValue }
            #expect(gst_harness_push(harness, buffer) == GST_FLOW_OK)
            if let out = gst_harness_pull(harness) { gst_buffer_unref(out) }
            var result = (seeded: false, memoryFrames: -1)
            while let message = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT) {
                if let structure = gst_message_get_structure(message),
                   String(cString: gst_structure_get_name(structure)) == "matanyone-stats" {
                    result.seeded = gst_structure_has_field(structure, "seed-ms") != 0
                    var frames: guint = 0
                    if gst_structure_get_uint(structure, "memory-frames", &frames) != 0 { result.memoryFrames = Int(frames) }
                }
                gst_message_unref(message)
            }
            return result
        }

        func event(_ event: UnsafeMutablePointer<GstEvent>) { #expect(gst_harness_push_event(harness, event) != 0) }
    }

    @Test func aDiscontIsAGapThatKeepsTheTrack() throws {
        let track = try Track()
        #expect(track.push(ms: 0).seeded)
        #expect(!track.push(ms: 40).seeded)
        // A leaky queue dropped 9 frames: DISCONT, 400 ms later.
        let after = track.push(ms: 440, discont: true)
        #expect(!after.seeded)
        #expect(after.memoryFrames == 2)  // the permanent frame and frame 2: cadence counts processed frames
    }

    @Test func aGapLongerThanResetAfterGapStartsOver() throws {
        let track = try Track("reset-after-gap=1000")
        #expect(track.push(ms: 0).seeded)
        #expect(!track.push(ms: 40).seeded)
        #expect(!track.push(ms: 900, discont: true).seeded)
        #expect(track.push(ms: 3000, discont: true).seeded)
        // Backwards too (a looping source without a new segment).
        #expect(!track.push(ms: 3040).seeded)
        #expect(track.push(ms: 0, discont: true).seeded)
    }

    @Test func resetAfterGapZeroResetsOnEveryDiscont() throws {
        let track = try Track("reset-after-gap=0")
        #expect(track.push(ms: 0).seeded)
        #expect(!track.push(ms: 40).seeded)
        #expect(track.push(ms: 80, discont: true).seeded)
        #expect(!track.push(ms: 5000).seeded)  // no DISCONT: no reset, whatever the gap
    }

    @Test func flushStopStreamStartAndANewSegmentStartOver() throws {
        let track = try Track()
        #expect(track.push(ms: 0).seeded)
        #expect(!track.push(ms: 40).seeded)
        track.event(gst_event_new_flush_start())
        track.event(gst_event_new_flush_stop(1))
        #expect(track.push(ms: 80).seeded)
        #expect(!track.push(ms: 120).seeded)
        track.event(gst_event_new_stream_start("another"))
        #expect(track.push(ms: 160).seeded)
        var segment = GstSegment()
        gst_segment_init(&segment, GST_FORMAT_TIME)
        segment.start = 10_000_000_000
        segment.time = 10_000_000_000
        track.event(gst_event_new_segment(&segment))
        #expect(track.push(ms: 10_000).seeded)
        #expect(!track.push(ms: 10_040).seeded)
        // The same segment again is no seek.
        track.event(gst_event_new_segment(&segment))
        #expect(!track.push(ms: 10_080).seeded)
    }

    @Test func capsOfTheSameSizeKeepTheTrackAnotherSizeStartsOver() throws {
        let track = try Track()
        #expect(track.push(ms: 0).seeded)
        #expect(!track.push(ms: 40).seeded)
        gst_harness_set_src_caps_str(track.harness, "video/x-raw,format=BGRA,width=512,height=288,framerate=50/1")
        #expect(!track.push(ms: 60).seeded)
        gst_harness_set_src_caps_str(track.harness, "video/x-raw,format=BGRA,width=256,height=144,framerate=50/1")
        #expect(track.push(ms: 80, width: 256, height: 144).seeded)
    }
}
