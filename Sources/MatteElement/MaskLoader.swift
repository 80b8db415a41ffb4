import CGStreamer
import Foundation
import MatteEngine

/// Reads a seed mask from any image file GStreamer can decode (PNG, JPEG, …) as 8-bit grey, with a
/// small private pipeline: filesrc ! decodebin ! videoconvert ! GRAY8 ! appsink.
enum MaskLoader {
    struct Mask {
        let pixels: [UInt8]
        let width: Int
        let height: Int

        var foregroundFraction: Double {
            Double(pixels.reduce(0) { $0 + ($1 >= 128 ? 1 : 0) }) / Double(max(pixels.count, 1))
        }
    }

    /// A seam for in-process tests: run on the thread that loads the mask at a path, before it is
    /// read. The plugin never sets one.
    static let beforeLoading = Locked<[String: () -> Void]>([:])
    /// How long the decoder has to preroll or fail.
    static let decodeTimeoutNs: GstClockTime = 10_000_000_000
    /// A seam for in-process tests: a shorter decode timeout for a path. The plugin never sets one.
    static let decodeTimeouts = Locked<[String: GstClockTime]>([:])

    static func load(_ path: String) throws -> Mask {
        if let hook = beforeLoading.withLock({ $0[path] }) { hook() }
        try SeedImage.check(path)
        let escaped = path.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        let description = "filesrc location=\"\(escaped)\" ! decodebin ! videoconvert ! video/x-raw,format=GRAY8 "
            + "! appsink name=sink sync=false max-buffers=1"
        var parseError: UnsafeMutablePointer<GError>?
        guard let pipeline = gst_parse_launch(description, &parseError) else {
            let reason = parseError.map { String(cString: $0.pointee.message) } ?? "?"
            throw EngineError.fileUnreadable(path: path, detail: "cannot build a decoder (\(reason))")
        }
        if let parseError { g_error_free(parseError) }
        defer {
            gst_element_set_state(pipeline, GST_STATE_NULL)
            gst_object_unref(pipeline)
        }
        let sinkElement = gst_bin_get_by_name(asBin(pipeline), "sink")!
        defer { gst_object_unref(sinkElement) }
        gst_element_set_state(pipeline, GST_STATE_PAUSED)
        // Wait for preroll (the decoded image reached the appsink) or for the decoder's error.
        let bus = gst_element_get_bus(pipeline)!
        defer { gst_object_unref(bus) }
        let wanted = GstMessageType(rawValue: GST_MESSAGE_ERROR.rawValue | GST_MESSAGE_ASYNC_DONE.rawValue | GST_MESSAGE_EOS.rawValue)
        let timeoutNs = decodeTimeouts.withLock { $0[path] } ?? decodeTimeoutNs
        guard let message = gst_bus_timed_pop_filtered(bus, timeoutNs, wanted) else {
            // (Not "cannot decode": the decoder said nothing in time, which a stalled file system or a
            // huge image explains. A preroll that came meanwhile is not taken: the answer is the timeout.)
            throw EngineError.fileUnreadable(path: path, detail: "decoding it timed out: no image and no error from the "
                                             + "decoder after \(Double(timeoutNs) / 1e9) s (a stalled file system, or an image too large?)")
        }
        do {
            defer { gst_message_unref(message) }
            if message.pointee.type == GST_MESSAGE_ERROR {
                var error: UnsafeMutablePointer<GError>?
                gst_message_parse_error(message, &error, nil)
                let reason = error.map { String(cString: $0.pointee.message) } ?? "decoding failed"
                if let error { g_error_free(error) }
                throw EngineError.fileUnreadable(path: path, detail: "it is not an image GStreamer can decode (\(reason))")
            }
        }
        guard let sample = gst_app_sink_try_pull_preroll(asAppSink(sinkElement), 0) else {
            throw EngineError.fileUnreadable(path: path, detail: "it is not an image GStreamer can decode")
        }
        defer { gst_sample_unref(sample) }
        var info = GstVideoInfo()
        guard let caps = gst_sample_get_caps(sample), gst_video_info_from_caps(&info, caps) != 0,
              let buffer = gst_sample_get_buffer(sample) else {
            throw EngineError.fileUnreadable(path: path, detail: "the decoded image has no usable format")
        }
        var frame = GstVideoFrame()
        guard gst_video_frame_map(&frame, &info, buffer, GST_MAP_READ) != 0 else {
            throw EngineError.fileUnreadable(path: path, detail: "the decoded image cannot be mapped")
        }
        defer { gst_video_frame_unmap(&frame) }
        let plane = UnsafeRawBufferPointer(start: frame.map.0.data, count: Int(frame.map.0.size))
        let offset = frame.data.0.map { UnsafeRawPointer($0) - UnsafeRawPointer(frame.map.0.data!) } ?? -1
        do {
            let pixels = try MaskPixels.pack(plane, offset: offset, width: Int(info.width), height: Int(info.height),
                                             stride: Int(frame.info.stride.0))
            return Mask(pixels: pixels, width: Int(info.width), height: Int(info.height))
        } catch {
            throw EngineError.fileUnreadable(path: path, detail: "the decoded image's plane is unusable (\(error))")
        }
    }
}
