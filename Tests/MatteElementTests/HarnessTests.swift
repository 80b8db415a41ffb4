import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import TestPaths

/// The element driven buffer by buffer through GstHarness.
@Suite(.serialized) struct HarnessTests {
    private func makeHarness(_ extra: String = "") -> UnsafeMutablePointer<GstHarness> {
        precondition(gstreamerReady)
        return gst_harness_new_parse("\(TestPaths.element) \(extra)")!
    }

    private func caps(_ width: Int, _ height: Int, _ format: String = "BGRA") -> String {
        "video/x-raw,format=\(format),width=\(width),height=\(height),framerate=30/1"
    }

    /// A frame with a bright blob on grey; `stride` may exceed 4·width (then a GstVideoMeta says so).
    private func frame(_ width: Int, _ height: Int, stride: Int? = nil, seed: Int = 0) -> UnsafeMutablePointer<GstBuffer> {
        let rowBytes = stride ?? width * 4
        var bytes = [UInt8](repeating: 0xEE, count: rowBytes * height)
        for y in 0..<height {
            for x in 0..<width {
                let inside = abs(x - width / 2 - seed) < width / 5 && abs(y - height / 2) < height / 3
                let value: UInt8 = inside ? 230 : UInt8(60 + (x * 7 + y * 3 + seed) % 40)
                bytes[y * rowBytes + 4 * x] = value
                bytes[y * rowBytes + 4 * x + 1] = inside ? 180 : value
                bytes[y * rowBytes + 4 * x + 2] = inside ? 150 : value
                bytes[y * rowBytes + 4 * x + 3] = 255
            }
        }
        let buffer = gst_buffer_new_allocate(nil, gsize(bytes.count), nil)!
        _ = bytes.withUnsafeBufferPointer { gst_buffer_fill(buffer, 0, $0.baseAddress, gsize($0.count)) }
        if let stride {
            var offsets: [gsize] = [0, 0, 0, 0]
            var strides: [gint] = [gint(stride), 0, 0, 0]
            gst_buffer_add_video_meta_full(buffer, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_FORMAT_BGRA,
                                           guint(width), guint(height), 1, &offsets, &strides)
        }
        return buffer
    }

    private func pullBytes(_ harness: UnsafeMutablePointer<GstHarness>) -> [UInt8]? {
        guard let buffer = gst_harness_pull(harness) else { return nil }
        defer { gst_buffer_unref(buffer) }
        var map = GstMapInfo()
        guard gst_buffer_map(buffer, &map, GST_MAP_READ) != 0 else { return nil }
        defer { gst_buffer_unmap(buffer, &map) }
        return Array(UnsafeBufferPointer(start: map.data, count: Int(map.size)))
    }

    @Test func paddedStridesGiveTheSameMatteAsTightRows() throws {
        let harness = makeHarness()
        defer { gst_harness_teardown(harness) }
        gst_harness_set_src_caps_str(harness, caps(90, 50))
        gst_harness_set_sink_caps_str(harness, caps(90, 50, "GRAY8"))
        #expect(gst_harness_push(harness, frame(90, 50)) == GST_FLOW_OK)
        let tight = try #require(pullBytes(harness))
        #expect(gst_harness_push(harness, frame(90, 50, stride: 90 * 4 + 128)) == GST_FLOW_OK)
        let padded = try #require(pullBytes(harness))
        #expect(tight == padded)
        #expect(tight.count == 92 * 50)
    }

    @Test func capsChangeMidStreamRenegotiates() throws {
        let harness = makeHarness()
        defer { gst_harness_teardown(harness) }
        gst_harness_set_src_caps_str(harness, caps(64, 48))
        gst_harness_set_sink_caps_str(harness, "video/x-raw,format=GRAY8")
        #expect(gst_harness_push(harness, frame(64, 48)) == GST_FLOW_OK)
        #expect(try #require(pullBytes(harness)).count == 64 * 48)
        gst_harness_set_src_caps_str(harness, caps(160, 90))
        #expect(gst_harness_push(harness, frame(160, 90)) == GST_FLOW_OK)
        #expect(try #require(pullBytes(harness)).count == 160 * 90)
        gst_harness_set_src_caps_str(harness, caps(33, 21))
        #expect(gst_harness_push(harness, frame(33, 21)) == GST_FLOW_OK)
        #expect(try #require(pullBytes(harness)).count == 36 * 21)
    }

    @Test func residentMemoryStaysFlatOver2000Frames() throws {
        let harness = makeHarness("background=blur")
        defer { gst_harness_teardown(harness) }
        gst_harness_set_src_caps_str(harness, caps(128, 72))
        gst_harness_set_sink_caps_str(harness, caps(128, 72, "RGBA"))
        var baseline = 0
        var failedPushes = 0
        for index in 0..<2000 {
            if gst_harness_push(harness, frame(128, 72, seed: index % 13)) != GST_FLOW_OK { failedPushes += 1 }
            guard let buffer = gst_harness_pull(harness) else {
                Issue.record("no output for frame \(index)")
                return
            }
            gst_buffer_unref(buffer)
            if index == 200 { baseline = residentBytes() }
        }
        let growth = residentBytes() - baseline
        #expect(failedPushes == 0)
        #expect(growth < 4 << 20, "RSS grew by \(growth) bytes over 1800 frames")
    }

    @Test func flushStopAndStreamStartAreAccepted() throws {
        let harness = makeHarness()
        defer { gst_harness_teardown(harness) }
        gst_harness_set_src_caps_str(harness, caps(64, 48))
        gst_harness_set_sink_caps_str(harness, caps(64, 48, "GRAY8"))
        #expect(gst_harness_push(harness, frame(64, 48)) == GST_FLOW_OK)
        let before = try #require(pullBytes(harness))
        #expect(gst_harness_push_event(harness, gst_event_new_flush_start()) != 0)
        #expect(gst_harness_push_event(harness, gst_event_new_flush_stop(1)) != 0)
        var segment = GstSegment()
        gst_segment_init(&segment, GST_FORMAT_TIME)
        #expect(gst_harness_push_event(harness, gst_event_new_segment(&segment)) != 0)
        #expect(gst_harness_push(harness, frame(64, 48)) == GST_FLOW_OK)
        // The segmenter is stateless: the same frame gives the same matte after the flush.
        #expect(try #require(pullBytes(harness)) == before)
    }
}
