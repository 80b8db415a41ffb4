import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import TestPaths

/// What a GStreamer user expects of any element: renegotiation when downstream asks for it, notify
/// only for a property that changed, the picture's description kept, interlacing never woven.
@Suite(.serialized) struct ConformanceTests {
    private func buffer(_ index: Int, width: Int = 64, height: Int = 48) -> UnsafeMutablePointer<GstBuffer> {
        let buffer = gst_buffer_new_allocate(nil, gsize(width * height * 4), nil)!
        gst_buffer_memset(buffer, 0, UInt8(60 + index % 100), gsize(width * height * 4))
        buffer.pointee.pts = GstClockTime(index) * 33_333_333
        buffer.pointee.duration = 33_333_333
        return buffer
    }

    /// Sync mode, BGRA in and out: the composite is written over the input buffer when it is writable
    /// (no output buffer, no copy), with the same bytes as a composite into a new buffer (the RGBA
    /// output, which is never in place, with its channels swapped back).
    @Test(arguments: ["none", "color", "blur"]) func bgraCompositesAreWrittenInPlace(background: String) throws {
        precondition(gstreamerReady)
        let frames = try Data(contentsOf: URL(fileURLWithPath: "\(TestPaths.dataDir)/test-sample2-512x288.bgra"))
        let frame = [UInt8](frames.prefix(512 * 288 * 4))
        func run(_ format: String) throws -> (inPlace: Bool, bytes: [UInt8]) {
            let harness = gst_harness_new_parse("\(TestPaths.element) background=\(background)")!
            defer { gst_harness_teardown(harness) }
            gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=512,height=288,framerate=30/1")
            gst_harness_set_sink_caps_str(harness, "video/x-raw,format=\(format),width=512,height=288,framerate=30/1")
            let input = gst_buffer_new_allocate(nil, gsize(frame.count), nil)!
            _ = frame.withUnsafeBufferPointer { gst_buffer_fill(input, 0, $0.baseAddress, gsize($0.count)) }
            let address = UnsafeRawPointer(input)  // (compared, never read: the buffer passes to the element)
            #expect(gst_harness_push(harness, input) == GST_FLOW_OK)
            let out = try #require(gst_harness_pull(harness))
            defer { gst_buffer_unref(out) }
            var map = GstMapInfo()
            gst_buffer_map(out, &map, GST_MAP_READ)
            defer { gst_buffer_unmap(out, &map) }
            return (UnsafeRawPointer(out) == address, Array(UnsafeBufferPointer(start: map.data, count: Int(map.size))))
        }
        let bgra = try run("BGRA"), rgba = try run("RGBA")
        #expect(bgra.inPlace && !rgba.inPlace)
        var swapped = rgba.bytes
        for pixel in stride(from: 0, to: swapped.count, by: 4) { swapped.swapAt(pixel, pixel + 2) }
        #expect(bgra.bytes == swapped)
    }

    /// Downstream switching from BGRA to GRAY8 mid-stream (a capsfilter's caps changed: RECONFIGURE
    /// upstream) is followed in both modes; async mode ignored it before.
    @Test(arguments: ["sync", "async"]) func reconfigureFromDownstreamIsFollowed(mode: String) throws {
        precondition(gstreamerReady)
        let harness = gst_harness_new_parse("\(TestPaths.element) mode=\(mode) ! capsfilter name=cf caps=video/x-raw,format=BGRA")!
        defer { gst_harness_teardown(harness) }
        gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=64,height=48,framerate=30/1")
        func pushAndPull(_ index: Int) -> Int? {
            #expect(gst_harness_push(harness, buffer(index)) == GST_FLOW_OK)
            guard let out = gst_harness_pull(harness) else { return nil }
            defer { gst_buffer_unref(out) }
            return Int(gst_buffer_get_size(out))
        }
        #expect((0..<3).map(pushAndPull) == [Int?](repeating: 64 * 48 * 4, count: 3))
        let bin = UnsafeMutableRawPointer(harness.pointee.element!).assumingMemoryBound(to: GstBin.self)
        let capsfilter = try #require(gst_bin_get_by_name(bin, "cf"))
        defer { gst_object_unref(capsfilter) }
        gst_util_set_object_arg(UnsafeMutableRawPointer(capsfilter).assumingMemoryBound(to: GObject.self), "caps",
                                "video/x-raw,format=GRAY8")
        #expect((3..<6).map(pushAndPull) == [Int?](repeating: 64 * 48, count: 3))
    }

    /// A READY-only property set while PLAYING is ignored (with a warning) and emits no notify; a
    /// property mutable while playing notifies.
    @Test func anIgnoredSetEmitsNoNotify() throws {
        precondition(gstreamerReady)
        let harness = gst_harness_new_parse("\(TestPaths.element) name=props")!
        defer { gst_harness_teardown(harness) }
        gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=64,height=48,framerate=30/1")
        #expect(gst_harness_push(harness, buffer(0)) == GST_FLOW_OK)
        if let out = gst_harness_pull(harness) { gst_buffer_unref(out) }
        let bin = UnsafeMutableRawPointer(harness.pointee.element!).assumingMemoryBound(to: GstBin.self)
        let element = try #require(gst_bin_get_by_name(bin, "props"))
        defer { gst_object_unref(element) }
        #expect(element.pointee.current_state == GST_STATE_PLAYING)
        let object = UnsafeMutableRawPointer(element).assumingMemoryBound(to: GObject.self)
        let notified = UnsafeMutablePointer<[String]>.allocate(capacity: 1)
        notified.initialize(to: [])
        defer { notified.deinitialize(count: 1); notified.deallocate() }
        let handler: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<GParamSpec>?, UnsafeMutableRawPointer?) -> Void = {
            _, spec, data in
            data!.assumingMemoryBound(to: [String].self).pointee.append(String(cString: spec!.pointee.name))
        }
        let id = g_signal_connect_data(object, "notify", unsafeBitCast(handler, to: GCallback.self), notified, nil, GConnectFlags(rawValue: 0))
        defer { g_signal_handler_disconnect(object, id) }
        gst_util_set_object_arg(object, "working-size", "160")
        var value = GValue()
        g_value_init(&value, GType(7 << 2))  // G_TYPE_UINT
        g_object_get_property(object, "working-size", &value)
        #expect(g_value_get_uint(&value) == 288, "the ignored set changed the value")
        g_value_unset(&value)
        #expect(notified.pointee.isEmpty, "notify for an ignored set: \(notified.pointee)")
        gst_util_set_object_arg(object, "reset-after-gap", "1000")
        #expect(notified.pointee == ["reset-after-gap"])
    }

    /// A composite keeps the frame's colorimetry and pixel aspect ratio (a bt709 frame left
    /// unlabelled is read downstream as sRGB); the grey alpha keeps the aspect ratio only.
    @Test func compositeKeepsColorimetryAndAspectRatio() throws {
        let source = "videotestsrc num-buffers=1 ! video/x-raw,format=BGRA,width=64,height=48,colorimetry=bt709,pixel-aspect-ratio=4/3"
        let composite = runPipeline("\(source) ! \(TestPaths.element) ! video/x-raw,format=BGRA ! appsink name=out")
        #expect(composite.error == nil, "\(composite.error?.message ?? "")")
        let compositeCaps = try #require(composite.caps.first)
        #expect(compositeCaps.contains("colorimetry=(string)bt709") && compositeCaps.contains("pixel-aspect-ratio=(fraction)4/3"),
                "\(compositeCaps)")
        let alpha = runPipeline("\(source) ! \(TestPaths.element) ! video/x-raw,format=GRAY8 ! appsink name=out")
        let alphaCaps = try #require(alpha.caps.first)
        #expect(!alphaCaps.contains("bt709") && alphaCaps.contains("pixel-aspect-ratio=(fraction)4/3"), "\(alphaCaps)")
    }

    /// alphacombine takes a GRAY8 alpha only with the main stream's colour range: with gray-range=limited
    /// the element's alpha joins a default (limited-range) I420 stream, and the combined A420 frame's
    /// alpha plane is the element's alpha byte for byte; by default the alpha says full range (and
    /// alphacombine refuses it), which a capsfilter may still change.
    @Test func limitedRangeGrayJoinsAlphacombine() throws {
        let source = "videotestsrc num-buffers=3 pattern=ball ! video/x-raw,format=I420,width=64,height=48"
        func combined(_ range: String) -> PipelineRun {
            runPipeline("\(source) ! tee name=t t. ! queue ! c.sink t. ! queue ! videoconvert ! video/x-raw,format=BGRA "
                        + "! \(TestPaths.element) gray-range=\(range) ! video/x-raw,format=GRAY8 ! queue "
                        + "! alphacombine name=c ! appsink name=out")
        }
        let limited = combined("limited")
        #expect(limited.error == nil && limited.reachedEOS, "\(limited.error?.message ?? "")")
        let alpha = runPipeline("\(source) ! videoconvert ! video/x-raw,format=BGRA ! \(TestPaths.element) gray-range=limited "
                                + "! video/x-raw,format=GRAY8 ! appsink name=out")
        #expect(alpha.caps.first?.contains("colorimetry=(string)2:0:0:0") == true, "\(alpha.caps.first ?? "")")
        #expect(limited.samples.count == 3 && alpha.samples.count == 3)
        for (joined, own) in zip(limited.samples, alpha.samples) {
            #expect(joined.count == 64 * 48 * 3 / 2 + own.count && Array(joined.suffix(own.count)) == own)
        }
        #expect(combined("full").error?.message.contains("range") == true)
        let picked = runPipeline("\(source) ! videoconvert ! video/x-raw,format=BGRA ! \(TestPaths.element) "
                                 + "! video/x-raw,format=GRAY8,colorimetry=bt601 ! appsink name=out")
        #expect(picked.error == nil && picked.caps.first?.contains("colorimetry=(string)bt601") == true, "\(picked.caps.first ?? "")")
        let plain = runPipeline("\(source) ! videoconvert ! video/x-raw,format=BGRA ! \(TestPaths.element) "
                                + "! video/x-raw,format=GRAY8 ! appsink name=out")
        #expect(plain.caps.first.map { !$0.contains("2:0:0:0") } == true)
    }

    /// Interlaced input is refused at negotiation with the fix in the message, never matted woven.
    @Test(arguments: ["interleaved", "mixed"]) func interlacedInputIsRefusedWithTheFix(mode: String) throws {
        let run = runPipeline("videotestsrc num-buffers=2 ! video/x-raw,format=BGRA,width=64,height=48,interlace-mode=\(mode) "
                              + "! \(TestPaths.element) ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-stream-error-quark")
        #expect(error.message.contains("interlace-mode=\(mode)") && error.message.contains("deinterlace"), "\(error.message)")
        // With deinterlace in front, the same source is matted.
        let fixed = runPipeline("videotestsrc num-buffers=2 ! video/x-raw,format=BGRA,width=64,height=48,interlace-mode=\(mode) "
                                + "! deinterlace ! videoconvert ! video/x-raw,format=BGRA ! \(TestPaths.element) ! fakesink")
        #expect(fixed.error == nil && fixed.reachedEOS, "\(fixed.error?.message ?? "")")
    }

    /// Field-per-buffer video (interlace-mode=alternate, the format:Interlaced caps feature) reaches
    /// negotiation and is refused there with the same advice, not with a bare not-negotiated; the
    /// advice works.
    @Test func alternateFieldsAreRefusedWithTheFix() throws {
        let caps = "video/x-raw(format:Interlaced),format=BGRA,width=64,height=48,interlace-mode=alternate,framerate=60/1"
        func fields(_ pipeline: UnsafeMutablePointer<GstElement>) {
            let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
            let source = gst_bin_get_by_name(bin, "src")!
            defer { gst_object_unref(source) }
            let appsrc = UnsafeMutableRawPointer(source).assumingMemoryBound(to: GstAppSrc.self)
            for index in 0..<4 {
                let buffer = gst_buffer_new_allocate(nil, gsize(64 * 24 * 4), nil)!
                gst_buffer_memset(buffer, 0, 90, gsize(64 * 24 * 4))
                buffer.pointee.pts = GstClockTime(index) * 16_666_667
                buffer.pointee.duration = 16_666_667
                if index % 2 == 0 { buffer.pointee.mini_object.flags |= GST_VIDEO_BUFFER_FLAG_TOP_FIELD.rawValue }
                else { buffer.pointee.mini_object.flags |= GST_VIDEO_BUFFER_FLAG_BOTTOM_FIELD.rawValue }
                _ = gst_app_src_push_buffer(appsrc, buffer)
            }
            _ = gst_app_src_end_of_stream(appsrc)
        }
        let run = runPipeline("appsrc name=src format=time caps=\"\(caps)\" ! \(TestPaths.element) ! fakesink", before: fields)
        let error = try #require(run.error)
        #expect(error.domain == "gst-stream-error-quark")
        #expect(error.message.contains("interlace-mode=alternate") && error.message.contains("deinterlace"), "\(error.message)")
        let fixed = runPipeline("appsrc name=src format=time caps=\"\(caps)\" ! deinterlace ! videoconvert "
                                + "! video/x-raw,format=BGRA ! \(TestPaths.element) ! fakesink", before: fields)
        #expect(fixed.error == nil && fixed.reachedEOS, "\(fixed.error?.message ?? "")")
    }

    /// Metas that depend only on the video's geometry (a region of interest) survive both modes and
    /// both outputs; the input's GstVideoMeta (its memory's strides) does not become the output's.
    @Test(arguments: ["sync", "async"]) func geometryMetasAreKept(mode: String) throws {
        precondition(gstreamerReady)
        for output in ["GRAY8", "BGRA"] {
            let harness = gst_harness_new_parse("\(TestPaths.element) mode=\(mode)")!
            defer { gst_harness_teardown(harness) }
            gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=64,height=48,framerate=30/1")
            gst_harness_set_sink_caps_str(harness, "video/x-raw,format=\(output),width=64,height=48,framerate=30/1")
            let input = buffer(0)
            _ = gst_buffer_add_video_region_of_interest_meta(input, "person", 3, 4, 20, 30)
            _ = gst_buffer_add_video_meta(input, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_FORMAT_BGRA, 64, 48)
            #expect(gst_harness_push(harness, input) == GST_FLOW_OK)
            let out = try #require(gst_harness_pull(harness))
            defer { gst_buffer_unref(out) }
            let meta = try #require(gst_buffer_get_meta(out, gst_video_region_of_interest_meta_api_get_type()), "ROI meta lost (\(output))")
            let roi = UnsafeMutableRawPointer(meta).assumingMemoryBound(to: GstVideoRegionOfInterestMeta.self).pointee
            #expect((roi.x, roi.y, roi.w, roi.h) == (3, 4, 20, 30))
            if let video = gst_buffer_get_video_meta(out) {
                #expect(video.pointee.format == (output == "GRAY8" ? GST_VIDEO_FORMAT_GRAY8 : GST_VIDEO_FORMAT_BGRA))
            }
        }
    }

    /// alpha-mode=premultiplied: each colour is the straight output's multiplied by its alpha,
    /// rounded; the alpha is the same; an opaque composite is unchanged.
    @Test func premultipliedOutputIsTheStraightOneTimesAlpha() throws {
        let frames = "\(TestPaths.dataDir)/test-sample2-512x288.bgra"
        let source = "filesrc location=\"\(frames)\" blocksize=\(512 * 288 * 4) ! rawvideoparse format=bgra width=512 height=288 "
            + "framerate=25/1 ! identity eos-after=2"
        func output(_ extra: String) -> [UInt8]? {
            runPipeline("\(source) ! \(TestPaths.element) background=none \(extra) ! video/x-raw,format=BGRA ! appsink name=out").samples.first
        }
        let straight = try #require(output(""))
        let premultiplied = try #require(output("alpha-mode=premultiplied"))
        #expect(straight.count == premultiplied.count)
        var soft = 0, wrong = 0
        for pixel in stride(from: 0, to: straight.count, by: 4) {
            let alpha = Double(straight[pixel + 3])
            if alpha > 0, alpha < 255 { soft += 1 }
            if premultiplied[pixel + 3] != straight[pixel + 3] { wrong += 1 }
            for channel in 0..<3 where premultiplied[pixel + channel] != UInt8((Double(straight[pixel + channel]) * alpha / 255).rounded()) {
                wrong += 1
            }
        }
        #expect(wrong == 0 && soft > 100, "\(wrong) bytes off, \(soft) soft pixels")
        let opaque = runPipeline("\(source) ! \(TestPaths.element) background=blur alpha-mode=premultiplied ! video/x-raw,format=BGRA "
                                 + "! appsink name=out").samples.first
        let opaqueStraight = runPipeline("\(source) ! \(TestPaths.element) background=blur ! video/x-raw,format=BGRA ! appsink name=out")
            .samples.first
        #expect(opaque != nil && opaque == opaqueStraight)
    }
}
