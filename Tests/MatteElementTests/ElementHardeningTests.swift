import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import TestPaths

/// Bad buffers, property changes racing the stream, and what the bus says about them.
@Suite(.serialized) struct ElementHardeningTests {
    let data = TestPaths.dataDir

    /// A BGRA buffer of `bytes` with a GstVideoMeta declaring `stride`.
    private func buffer(width: Int, height: Int, stride: Int, bytes: Int) -> UnsafeMutablePointer<GstBuffer> {
        precondition(gstreamerReady)
        let buffer = gst_buffer_new_allocate(nil, gsize(bytes), nil)!
        gst_buffer_memset(buffer, 0, 90, gsize(bytes))
        var offsets: [gsize] = [0, 0, 0, 0]
        var strides: [gint] = [gint(stride), 0, 0, 0]
        gst_buffer_add_video_meta_full(buffer, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_FORMAT_BGRA,
                                       guint(width), guint(height), 1, &offsets, &strides)
        return buffer
    }

    /// Pushes one buffer through a harnessed element and returns the flow and the ERROR it posted.
    private func push(_ buffer: UnsafeMutablePointer<GstBuffer>, width: Int, height: Int) -> (GstFlowReturn, BusError?) {
        precondition(gstreamerReady)
        let harness = gst_harness_new_parse(TestPaths.element)!
        defer { gst_harness_teardown(harness) }
        let bus = gst_bus_new()!
        defer { gst_object_unref(bus) }
        gst_element_set_bus(harness.pointee.element, bus)
        gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=\(width),height=\(height),framerate=30/1")
        gst_harness_set_sink_caps_str(harness, "video/x-raw,format=GRAY8,width=\(width),height=\(height),framerate=30/1")
        let flow = gst_harness_push(harness, buffer)
        var error: BusError?
        if let message = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR) {
            var gerror: UnsafeMutablePointer<GError>?
            gst_message_parse_error(message, &gerror, nil)
            if let gerror {
                error = BusError(domain: String(cString: g_quark_to_string(gerror.pointee.domain)), code: gerror.pointee.code,
                                 message: String(cString: gerror.pointee.message), debug: "")
                g_error_free(gerror)
            }
            gst_message_unref(message)
        }
        return (flow, error)
    }

    @Test func aStrideShorterThanARowIsAStreamFormatError() throws {
        let (flow, error) = push(buffer(width: 64, height: 48, stride: 64 * 4 - 16, bytes: 64 * 4 * 48), width: 64, height: 48)
        #expect(flow == GST_FLOW_ERROR)
        let reported = try #require(error)
        #expect(reported.domain == "gst-stream-error-quark")
        #expect(reported.code == Int32(GST_STREAM_ERROR_FORMAT.rawValue))
        #expect(reported.message.contains("240 bytes apart"))
    }

    @Test func aBufferTooShortForItsStrideIsAnErrorNotAnOverRead() {
        // The meta claims rows 4 KB apart; the buffer holds one tight frame.
        let (flow, _) = push(buffer(width: 64, height: 48, stride: 4096, bytes: 64 * 4 * 48), width: 64, height: 48)
        #expect(flow != GST_FLOW_OK)
    }

    /// An error while negotiating (here: a working size over the memory budget) reaches the bus
    /// once, from the element, with its own domain — not followed by a second report of it.
    @Test func aNegotiationErrorIsPostedOnce() throws {
        let description = "videotestsrc num-buffers=2 ! video/x-raw,format=BGRA,width=1920,height=1080 "
            + "! matanyone name=m engine=matanyone2 precision=fp32 working-size=4096 model-dir=\"\(TestPaths.modelDir)\" ! fakesink"
        let (fromElement, others) = try #require(withPlayingPipeline(description) { _, bus -> ([String], Int) in
            var fromElement: [String] = []
            var others = 0
            let deadline = Date().addingTimeInterval(30)
            var sawError = false
            let wanted = GstMessageType(rawValue: GST_MESSAGE_ERROR.rawValue | GST_MESSAGE_EOS.rawValue)
            while Date() < deadline {
                guard let message = gst_bus_timed_pop_filtered(bus, 200_000_000, wanted) else {
                    if sawError { break }
                    continue
                }
                defer { gst_message_unref(message) }
                if message.pointee.type == GST_MESSAGE_EOS { break }
                sawError = true
                var gerror: UnsafeMutablePointer<GError>?
                gst_message_parse_error(message, &gerror, nil)
                let source = objectName(message.pointee.src)
                if source == "m" { fromElement.append(String(cString: gerror!.pointee.message)) } else { others += 1 }
                g_error_free(gerror)
            }
            return (fromElement, others)
        })
        #expect(fromElement.count == 1, "\(fromElement)")
        #expect(fromElement.first?.contains("working-size=4096") == true)
        #expect(others <= 1, "the source's not-negotiated report at most")
    }

    /// Properties set from another thread while frames flow: settings, read-only-while-playing ones,
    /// the reseed signal, LATENCY queries. The stream must run to EOS (and stay clean under ThreadSanitizer).
    @Test func propertyStormWhilePlaying() throws {
        let mask = "\(data)/test-sample2-mask-512x288.png"
        var warnings = 0
        let run = runPipeline(
            "videotestsrc num-buffers=100000 ! video/x-raw,format=BGRA,width=64,height=48 ! \(TestPaths.element) name=m "
                + "! video/x-raw,format=RGBA ! fakesink sync=false",
            timeout: 120,
            whilePlaying: { pipeline in
                let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
                let element = gst_bin_get_by_name(bin, "m")!
                let address = Int(bitPattern: element)  // a plain number crosses into the thread
                let done = DispatchSemaphore(value: 0)
                Thread {
                    let element = UnsafeMutablePointer<GstElement>(bitPattern: address)!
                    let object = UnsafeMutableRawPointer(element).assumingMemoryBound(to: GObject.self)
                    for round in 0..<150 {
                        gst_util_set_object_arg(object, "background", ["none", "color", "blur"][round % 3])
                        gst_util_set_object_arg(object, "background-color", "\(UInt32(truncatingIfNeeded: round &* 2_654_435_761))")
                        gst_util_set_object_arg(object, "stats-interval", "\(round % 4)")
                        gst_util_set_object_arg(object, "seed-mask", round % 2 == 0 ? mask : "")
                        if round % 10 == 0 { gst_util_set_object_arg(object, "threads", "2") }  // READY only: a warning
                        shim_emit_reseed(element)
                        // The LATENCY query reads what the streaming thread writes.
                        let query = gst_query_new_latency()!
                        _ = gst_element_query(element, query)
                        gst_query_unref(query)
                    }
                    done.signal()
                }.start()
                done.wait()
                gst_object_unref(element)
                // The stream ends after the storm, so every warning it caused is on the bus before EOS.
                _ = gst_element_send_event(pipeline, gst_event_new_eos())
            })
        warnings = run.warnings.filter { $0.contains("READY") }.count
        #expect(run.error == nil, "\(String(describing: run.error))")
        #expect(run.reachedEOS)
        #expect(warnings >= 1)
    }

    /// `seed-mask` changed while playing is used from the next (re)seed on and does not interrupt the
    /// track until then. With the same frame repeated, a reseed onto mask B must give exactly what a
    /// stream seeded from B gives on its first frame.
    @Test func seedMaskChangedWhilePlayingSeedsTheNextReseed() throws {
        let maskA = "\(data)/test-sample2-mask-512x288.png"
        let maskB = TestPaths.scratch("mask-b") + "/b.png"
        _ = runPipeline("videotestsrc num-buffers=1 pattern=circular ! video/x-raw,format=GRAY8,width=512,height=288 "
                        + "! pngenc ! filesink location=\"\(maskB)\"")
        let frames = try Data(contentsOf: URL(fileURLWithPath: "\(data)/test-sample2-512x288.bgra"))
        let frame = [UInt8](frames.prefix(512 * 288 * 4))

        func run(seedMask: String, pushes: Int, between: ((UnsafeMutablePointer<GstElement>, Int) -> Void)? = nil) throws -> [[UInt8]] {
            try harnessOutputs("matanyone name=m engine=matanyone2 precision=fp32 model-dir=\"\(TestPaths.modelDir)\" warmup=0 "
                               + "seed=mask seed-mask=\"\(seedMask)\"", frame: frame, pushes: pushes, between: between)
        }

        let onlyA = try run(seedMask: maskA, pushes: 3)
        let onlyB = try run(seedMask: maskB, pushes: 1)
        #expect(maxDifference(onlyA[0], onlyB[0]) > 8, "the two masks must seed differently for this test to mean anything")
        let switched = try run(seedMask: maskA, pushes: 4) { element, index in
            let object = UnsafeMutableRawPointer(element).assumingMemoryBound(to: GObject.self)
            if index == 2 { gst_util_set_object_arg(object, "seed-mask", maskB) }
            if index == 3 { shim_emit_reseed(element) }
        }
        #expect(maxDifference(switched[2], onlyA[2]) <= 1, "the new mask interrupted the track")
        #expect(maxDifference(switched[3], onlyB[0]) <= 1, "the reseed did not use the new mask")
    }
}
