import CGStreamer
import Foundation
import MatteEngine
import MattePixels

// Every C callback, `Unmanaged` and pointer cast of the element lives in this file. The GType is
// `GstMatAnyone`: a GstVideoFilter whose instance carries one pointer to a retained `MatteFilter`,
// released in finalize before chaining up.

// MARK: - Typed views over C pointers

/// The element as the GStreamer API wants to see it (borrowed: the GObject owns the Swift side).
struct ElementHandle {
    let raw: UnsafeMutablePointer<GstMatAnyone>

    var element: UnsafeMutablePointer<GstElement> { UnsafeMutableRawPointer(raw).assumingMemoryBound(to: GstElement.self) }
    var gobject: UnsafeMutablePointer<GObject> { UnsafeMutableRawPointer(raw).assumingMemoryBound(to: GObject.self) }
    var object: UnsafeMutablePointer<GstObject> { UnsafeMutableRawPointer(raw).assumingMemoryBound(to: GstObject.self) }
    var transform: UnsafeMutablePointer<GstBaseTransform> {
        UnsafeMutableRawPointer(raw).assumingMemoryBound(to: GstBaseTransform.self)
    }

    var currentState: GstState { element.pointee.current_state }
    var name: String {
        guard let name = gst_object_get_name(object) else { return "" }
        defer { g_free(name) }
        return String(cString: name)
    }

    func reconfigureSource() { gst_base_transform_reconfigure_src(transform) }

    /// Whether the base class hands frames over in place (one writable buffer, `transform_frame_ip`).
    func setInPlace(_ inPlace: Bool) { gst_base_transform_set_in_place(transform, inPlace ? 1 : 0) }

    /// A reference of our own, for work on another thread that may still reach the element.
    func retain() { _ = gst_object_ref(UnsafeMutableRawPointer(object)) }
    func release() { gst_object_unref(UnsafeMutableRawPointer(object)) }

    /// The template caps of the pad in `direction` (a new reference).
    func padTemplateCaps(_ direction: GstPadDirection) -> UnsafeMutablePointer<GstCaps> {
        let pad = direction == GST_PAD_SRC ? transform.pointee.srcpad : transform.pointee.sinkpad
        return gst_pad_get_pad_template_caps(pad)
    }

    func postLatencyMessage() {
        gst_element_post_message(element, gst_message_new_latency(object))
    }

    /// Posts an element message; takes ownership of `structure`.
    func postElementMessage(_ structure: UnsafeMutablePointer<GstStructure>) {
        gst_element_post_message(element, gst_message_new_element(object, structure))
    }

    // The base class and the pads, as gst-plugins-rs's `parent_*` calls: what the element chains
    // up to or acts through.

    func parentSubmitInputBuffer(_ buffer: UnsafeMutablePointer<GstBuffer>?, isDiscont: gboolean) -> GstFlowReturn {
        parentTransformClass.pointee.submit_input_buffer(transform, isDiscont, buffer)
    }

    func parentGenerateOutput(_ output: UnsafeMutablePointer<UnsafeMutablePointer<GstBuffer>?>) -> GstFlowReturn {
        parentTransformClass.pointee.generate_output(transform, output)
    }

    /// An output buffer for `input`, allocated as the base class allocates its own (metadata and
    /// timestamps copied); the caller owns the reference.
    func prepareOutputBuffer(for input: UnsafeMutablePointer<GstBuffer>) -> (GstFlowReturn, UnsafeMutablePointer<GstBuffer>?) {
        var output: UnsafeMutablePointer<GstBuffer>?
        let flow = parentTransformClass.pointee.prepare_output_buffer(transform, input, &output)
        return (flow, output)
    }

    func parentProposeAllocation(_ decide: UnsafeMutablePointer<GstQuery>?, _ query: UnsafeMutablePointer<GstQuery>) -> Bool {
        parentTransformClass.pointee.propose_allocation(transform, decide, query) != 0
    }

    /// The video info of an ALLOCATION query's caps, nil when they are not video.
    func videoInfo(of query: UnsafeMutablePointer<GstQuery>) -> GstVideoInfo? {
        var caps: UnsafeMutablePointer<GstCaps>?
        var needPool: gboolean = 0
        gst_query_parse_allocation(query, &caps, &needPool)
        var info = GstVideoInfo()
        guard let caps, gst_video_info_from_caps(&info, caps) != 0 else { return nil }
        return info
    }

    /// Raises the minimum buffers of every pool in an ALLOCATION query by `count` (or proposes a
    /// pool-less entry with that minimum when there is none).
    func addMinimumBuffers(_ count: Int, to query: UnsafeMutablePointer<GstQuery>) {
        let pools = gst_query_get_n_allocation_pools(query)
        guard pools > 0 else {
            gst_query_add_allocation_pool(query, nil, videoInfo(of: query).map { guint($0.size) } ?? 0, guint(count), 0)
            return
        }
        for index in 0..<pools {
            var pool: UnsafeMutablePointer<GstBufferPool>?
            var size: guint = 0, minimum: guint = 0, maximum: guint = 0
            gst_query_parse_nth_allocation_pool(query, index, &pool, &size, &minimum, &maximum)
            let raised = minimum + guint(count)
            gst_query_set_nth_allocation_pool(query, index, pool, size, raised, maximum == 0 ? 0 : max(maximum, raised))
            if let pool { gst_object_unref(pool) }
        }
    }

    /// Pushes `event` (the reference passes on) on the source pad.
    func push(_ event: OwnedEvent) -> Bool { gst_pad_push_event(transform.pointee.srcpad, event.release()) != 0 }

    /// Pushes `buffer` (the reference passes on) on the source pad.
    func push(_ buffer: UnsafeMutablePointer<GstBuffer>) -> GstFlowReturn { gst_pad_push(transform.pointee.srcpad, buffer) }

    /// Renegotiates when downstream asked (RECONFIGURE); false when that failed.
    func reconfigure() -> Bool { gst_base_transform_reconfigure(transform) != 0 }

    /// Whether downstream asked to renegotiate (the flag `reconfigure` acts on, not cleared).
    var sourceNeedsReconfigure: Bool { gst_pad_needs_reconfigure(transform.pointee.srcpad) != 0 }

    var sourceIsFlushing: Bool { transform.pointee.srcpad.pointee.object.flags & GST_PAD_FLAG_FLUSHING.rawValue != 0 }

    var qosEnabled: Bool { gst_base_transform_is_qos_enabled(transform) != 0 }

    /// The base class's current input segment.
    var inputSegment: GstSegment { segmentOf(raw).pointee }

    enum Pad { case input, output }

    /// Maps `buffer` as a frame of the negotiated input (read) or output (write) info for the
    /// duration of `body`; nil when it cannot be mapped.
    func withMappedFrame<Result>(_ buffer: UnsafeMutablePointer<GstBuffer>, _ pad: Pad, _ body: (VideoFrameView) -> Result) -> Result? {
        let filter = videoFilter(raw)
        return pad == .input ? mapFrame(buffer, &filter.pointee.in_info, GST_MAP_READ, body)
            : mapFrame(buffer, &filter.pointee.out_info, GST_MAP_WRITE, body)
    }

    /// The negotiated input's video info, copied.
    var inputInfo: GstVideoInfo { videoFilter(raw).pointee.in_info }

    func liveTiming(of buffer: UnsafeMutablePointer<GstBuffer>) -> (runningTime: UInt64, now: UInt64)? {
        MatteElement.liveTiming(raw, buffer)
    }

    func arrival(of buffer: UnsafeMutablePointer<GstBuffer>, timing: (runningTime: UInt64, now: UInt64)?) -> GapRule.Arrival {
        MatteElement.arrival(raw, buffer, timing)
    }

    func postDropped(_ buffer: UnsafeMutablePointer<GstBuffer>, runningTime: UInt64, late: UInt64,
                     counts: (submitted: UInt, processed: UInt)) {
        MatteElement.postDropped(raw, buffer, runningTime: runningTime, late: late, counts: counts)
    }
}

/// A mapped video frame of a vfunc call (borrowed for the call only).
struct VideoFrameView {
    let frame: UnsafeMutablePointer<GstVideoFrame>

    var width: Int { Int(frame.pointee.info.width) }
    var height: Int { Int(frame.pointee.info.height) }
    var stride: Int { Int(frame.pointee.info.stride.0) }
    var bytes: UnsafeMutablePointer<UInt8> { frame.pointee.data.0!.assumingMemoryBound(to: UInt8.self) }
    var bgra: BGRAImage { BGRAImage(base: UnsafePointer(bytes), width: width, height: height, stride: stride) }
    var gray: GrayImage { GrayImage(base: bytes, width: width, height: height, stride: stride) }
    var pts: GstClockTime { frame.pointee.buffer.pointee.pts }
    /// Why the mapped plane cannot hold `height` rows of `width` pixels at its stride (a GstVideoMeta
    /// may declare any stride), or nil when it can.
    func layoutProblem(bytesPerPixel: Int) -> String? {
        let rowBytes = width * bytesPerPixel
        guard stride >= rowBytes else {
            return "a buffer's rows are \(stride) bytes apart (its GstVideoMeta stride) but a row of \(width) pixels "
                + "needs \(rowBytes): the upstream element produced an invalid buffer"
        }
        let mapped = frame.pointee.map.0
        let offset = UnsafeRawPointer(frame.pointee.data.0!) - UnsafeRawPointer(mapped.data!)
        let available = Int(mapped.size) - offset
        let needed = stride * (height - 1) + rowBytes
        guard offset >= 0, needed <= available else {
            return "a buffer holds \(max(available, 0)) bytes from its first row but \(height) rows of stride \(stride) "
                + "need \(needed): the upstream element produced an invalid buffer"
        }
        return nil
    }
}

/// An event reference this element owns (held behind frames in async mode): released in deinit.
final class OwnedEvent {
    private var event: UnsafeMutablePointer<GstEvent>?
    /// Takes over the caller's reference.
    init(taking event: UnsafeMutablePointer<GstEvent>) { self.event = event }
    /// Sticky, and kept by pads across a flush (tags, sticky custom events; not a segment or EOS).
    var outlivesFlush: Bool {
        guard let event, event.pointee.type != GST_EVENT_SEGMENT, event.pointee.type != GST_EVENT_EOS else { return false }
        return gst_event_type_get_flags(event.pointee.type).rawValue & GST_EVENT_TYPE_STICKY.rawValue != 0
    }
    /// Hands the reference on (pushed downstream).
    func release() -> UnsafeMutablePointer<GstEvent> {
        defer { event = nil }
        return event!
    }
    deinit { if let event { gst_event_unref(event) } }
}

/// A buffer reference this element owns (async mode's queue): released in deinit.
final class OwnedBuffer {
    let buffer: UnsafeMutablePointer<GstBuffer>
    private var owned = true
    /// Takes over the caller's reference.
    init(taking buffer: UnsafeMutablePointer<GstBuffer>) { self.buffer = buffer }
    /// Hands the reference on (to the base class, downstream): no longer released here.
    func release() -> UnsafeMutablePointer<GstBuffer> {
        owned = false
        return buffer
    }
    /// Another reference to the same buffer (for a second holder: the inference thread).
    func retained() -> OwnedBuffer { OwnedBuffer(taking: gst_buffer_ref(buffer)) }
    deinit { if owned { gst_buffer_unref(buffer) } }
}

/// Maps `buffer` read-only as a frame of `info` (a copy of the caps it came with, for a thread that
/// maps it after renegotiation may have moved on) for the duration of `body`; nil when it cannot be.
func withMappedFrame<Result>(_ buffer: OwnedBuffer, info: GstVideoInfo, _ body: (VideoFrameView) -> Result) -> Result? {
    var info = info
    return mapFrame(buffer.buffer, &info, GST_MAP_READ, body)
}

/// Maps `buffer` as a video frame of `info` for the duration of `body`; nil when it cannot be mapped.
private func mapFrame<Result>(_ buffer: UnsafeMutablePointer<GstBuffer>, _ info: UnsafeMutablePointer<GstVideoInfo>,
                                     _ flags: GstMapFlags, _ body: (VideoFrameView) -> Result) -> Result? {
    var frame = GstVideoFrame()
    guard gst_video_frame_map(&frame, info, buffer, flags) != 0 else { return nil }
    defer { gst_video_frame_unmap(&frame) }
    return withUnsafeMutablePointer(to: &frame) { body(VideoFrameView(frame: $0)) }
}

/// Casts for the GStreamer API's own class hierarchy (C "inheritance" by first member).
func asBin(_ element: UnsafeMutablePointer<GstElement>) -> UnsafeMutablePointer<GstBin> {
    UnsafeMutableRawPointer(element).assumingMemoryBound(to: GstBin.self)
}

func asAppSink(_ element: UnsafeMutablePointer<GstElement>) -> UnsafeMutablePointer<GstAppSink> {
    UnsafeMutableRawPointer(element).assumingMemoryBound(to: GstAppSink.self)
}

// MARK: - Type registration

private var parentClass: UnsafeMutablePointer<GstVideoFilterClass>!

private var parentObjectClass: UnsafeMutablePointer<GObjectClass> {
    UnsafeMutableRawPointer(parentClass).assumingMemoryBound(to: GObjectClass.self)
}

private var parentTransformClass: UnsafeMutablePointer<GstBaseTransformClass> {
    UnsafeMutableRawPointer(parentClass).assumingMemoryBound(to: GstBaseTransformClass.self)
}

extension MatteFilter {
    /// The behaviour of a `matanyone` element (nil for any other element): for in-process tests.
    static func of(_ element: UnsafeMutablePointer<GstElement>) -> MatteFilter? {
        g_type_check_instance_is_a(UnsafeMutableRawPointer(element).assumingMemoryBound(to: GTypeInstance.self), matAnyoneType) != 0
            ? filter(element) : nil
    }
}

private func filter(_ pointer: UnsafeMutableRawPointer?) -> MatteFilter {
    let instance = pointer!.assumingMemoryBound(to: GstMatAnyone.self)
    return Unmanaged<MatteFilter>.fromOpaque(instance.pointee.impl!).takeUnretainedValue()
}

/// GEnum types, registered once; names and nicks are strdup'ed because GLib keeps the pointers.
private func registerEnum<E: PropertyEnum>(_: E.Type) -> GType {
    let cases = Array(E.allCases)
    let values = UnsafeMutablePointer<GEnumValue>.allocate(capacity: cases.count + 1)
    for (index, item) in cases.enumerated() {
        values[index] = GEnumValue(value: gint(item.gValue), value_name: strdup(item.blurb), value_nick: strdup(item.nick))
    }
    values[cases.count] = GEnumValue(value: 0, value_name: nil, value_nick: nil)
    return g_enum_register_static(strdup(E.typeName), values)
}

private let enumTypes: [String: GType] = [
    OutputMode.typeName: registerEnum(OutputMode.self),
    BackgroundMode.typeName: registerEnum(BackgroundMode.self),
    EdgeColors.typeName: registerEnum(EdgeColors.self),
    AlphaMode.typeName: registerEnum(AlphaMode.self),
    GrayRange.typeName: registerEnum(GrayRange.self),
    Alignment.typeName: registerEnum(Alignment.self),
    EngineChoice.typeName: registerEnum(EngineChoice.self),
    SeederChoice.typeName: registerEnum(SeederChoice.self),
    ExecutionProvider.typeName: registerEnum(ExecutionProvider.self),
    SeedMode.typeName: registerEnum(SeedMode.self),
    MatteMode.typeName: registerEnum(MatteMode.self),
    PrecisionChoice.typeName: registerEnum(PrecisionChoice.self),
    SharedMemoryUse.typeName: registerEnum(SharedMemoryUse.self),
    ServerFrameFormat.typeName: registerEnum(ServerFrameFormat.self),
]

// Field-per-buffer video (interlace-mode=alternate) carries the format:Interlaced caps feature: it is
// in the templates so that such caps reach set_caps and are refused there with a message that says
// what to do, not with a bare not-negotiated.
private let sizeAndRate = "width=(int)[1, 32767], height=(int)[1, 32767], framerate=(fraction)[0/1, 2147483647/1]"
private let sinkCapsString = "video/x-raw, format=(string)BGRA, \(sizeAndRate); "
    + "video/x-raw(format:Interlaced), format=(string)BGRA, \(sizeAndRate), interlace-mode=(string)alternate"
private let sourceCapsString = "video/x-raw, format=(string){ BGRA, RGBA, GRAY8 }, \(sizeAndRate); "
    + "video/x-raw(format:Interlaced), format=(string){ BGRA, RGBA, GRAY8 }, \(sizeAndRate), interlace-mode=(string)alternate"

/// The GType `GstMatAnyone`, registered on first use.
let matAnyoneType: GType = {
    g_type_register_static_simple(
        shim_type_video_filter(), "GstMatAnyone",
        guint(MemoryLayout<GstMatAnyoneClass>.size), classInit,
        guint(MemoryLayout<GstMatAnyone>.size), instanceInit, GTypeFlags(rawValue: 0))
}()

private let classInit: GClassInitFunc = { klass, _ in
    parentClass = g_type_class_peek_parent(klass)!.assumingMemoryBound(to: GstVideoFilterClass.self)
    let objectClass = klass!.assumingMemoryBound(to: GObjectClass.self)
    let elementClass = klass!.assumingMemoryBound(to: GstElementClass.self)
    let transformClass = klass!.assumingMemoryBound(to: GstBaseTransformClass.self)
    let videoFilterClass = klass!.assumingMemoryBound(to: GstVideoFilterClass.self)

    objectClass.pointee.set_property = setPropertyTrampoline
    objectClass.pointee.get_property = getPropertyTrampoline
    objectClass.pointee.finalize = finalizeTrampoline
    installProperties(objectClass)
    installSignals(klass!)
    installMetadataAndPads(elementClass)
    installTransformHandlers(transformClass)
    installVideoFilterHandlers(videoFilterClass)
}

private func installMetadataAndPads(_ elementClass: UnsafeMutablePointer<GstElementClass>) {
    gst_element_class_set_metadata(
        elementClass, "MatAnyone human video matting", "Filter/Effect/Video",
        "Live human video matting (MatAnyone2, Robust Video Matting, or per-frame person segmentation): BGRA in, alpha plane "
            + "(GRAY8) or composite (BGRA/RGBA) out",
        "gst-matanyone developers")
    for (name, direction, capsString) in [("sink", GST_PAD_SINK, sinkCapsString), ("src", GST_PAD_SRC, sourceCapsString)] {
        let caps = gst_caps_from_string(capsString)
        gst_element_class_add_pad_template(elementClass, gst_pad_template_new(name, direction, GST_PAD_ALWAYS, caps))
        gst_caps_unref(caps)
    }
}

private func installTransformHandlers(_ transformClass: UnsafeMutablePointer<GstBaseTransformClass>) {
    transformClass.pointee.passthrough_on_same_caps = 0
    transformClass.pointee.transform_ip_on_passthrough = 0
    transformClass.pointee.start = { trans in filter(trans).startVfunc() ? 1 : 0 }
    transformClass.pointee.stop = { trans in filter(trans).stop() ? 1 : 0 }
    transformClass.pointee.transform_caps = { trans, direction, caps, filterCaps in
        filter(trans).transformCaps(direction: direction, caps: caps!, filter: filterCaps)
    }
    transformClass.pointee.sink_event = { trans, event in
        guard !filter(trans).sinkEvent(sinkEvent(event!), event!) else { return 1 }  // (held: it goes on later)
        return parentTransformClass.pointee.sink_event(trans, event)
    }
    transformClass.pointee.src_event = { trans, event in
        guard !filter(trans).sourceEvent(sourceEvent(event!)) else {
            gst_event_unref(event)
            return 1
        }
        return parentTransformClass.pointee.src_event(trans, event)
    }
    transformClass.pointee.submit_input_buffer = { trans, isDiscont, buffer in
        filter(trans).submit(buffer, isDiscont: isDiscont)
    }
    transformClass.pointee.generate_output = { trans, output in filter(trans).generateOutput(output!) }
    transformClass.pointee.propose_allocation = { trans, decide, query in
        filter(trans).proposeAllocation(decideQuery: decide, query: query!) ? 1 : 0
    }
    transformClass.pointee.transform_meta = { trans, outbuf, meta, inbuf in
        let matte = filter(trans)
        var tags: [String] = []
        if let list = gst_meta_api_type_get_tags(meta!.pointee.info.pointee.api) {
            var index = 0
            while let tag = list[index] {
                tags.append(String(cString: tag))
                index += 1
            }
        }
        return matte.keepsMeta(tags: tags) ? 1 : parentTransformClass.pointee.transform_meta(trans, outbuf, meta, inbuf)
    }
    transformClass.pointee.query = { trans, direction, query in
        let answered = filter(trans).query(direction: direction, type: query!.pointee.type) {
            parentTransformClass.pointee.query(trans, direction, query) != 0
        }
        guard answered else { return 0 }
        if direction == GST_PAD_SRC, query!.pointee.type == GST_QUERY_LATENCY {
            var live: gboolean = 0
            var minimum: GstClockTime = 0, maximum: GstClockTime = 0
            gst_query_parse_latency(query, &live, &minimum, &maximum)
            let (newMinimum, newMaximum) = filter(trans).answerLatency(live: live != 0, minimum: minimum, maximum: maximum)
            gst_query_set_latency(query, live, newMinimum, newMaximum)
        }
        return 1
    }
}

private func installVideoFilterHandlers(_ videoFilterClass: UnsafeMutablePointer<GstVideoFilterClass>) {
    videoFilterClass.pointee.set_info = { videoFilter, _, inputInfo, _, outputInfo in
        filter(videoFilter).setInfo(input: inputInfo!, output: outputInfo!) ? 1 : 0
    }
    videoFilterClass.pointee.transform_frame = { videoFilter, input, output in
        filter(videoFilter).transform(input: VideoFrameView(frame: input!), output: VideoFrameView(frame: output!))
    }
    videoFilterClass.pointee.transform_frame_ip = { videoFilter, frame in
        filter(videoFilter).transformInPlace(VideoFrameView(frame: frame!))
    }
}

/// The instance as the GstVideoFilter it is (negotiated infos).
private func videoFilter(_ instance: UnsafeMutableRawPointer) -> UnsafeMutablePointer<GstVideoFilter> {
    instance.assumingMemoryBound(to: GstVideoFilter.self)
}

/// The base class's current input segment (a field of the instance, updated by SEGMENT events).
private func segmentOf(_ instance: UnsafeMutableRawPointer) -> UnsafeMutablePointer<GstSegment> {
    (instance + MemoryLayout<GstBaseTransform>.offset(of: \GstBaseTransform.segment)!).assumingMemoryBound(to: GstSegment.self)
}

/// A buffer's running time and the clock's running time now, when the element runs against a clock
/// and the buffer is timestamped in a TIME segment.
private func liveTiming(_ trans: UnsafeMutableRawPointer, _ buffer: UnsafeMutablePointer<GstBuffer>)
    -> (runningTime: UInt64, now: UInt64)? {
    let none = shim_clock_time_none()
    let segment = segmentOf(trans)
    let element = trans.assumingMemoryBound(to: GstElement.self)
    guard buffer.pointee.pts != none, segment.pointee.format == GST_FORMAT_TIME,
          let clock = gst_element_get_clock(element) else { return nil }
    defer { gst_object_unref(clock) }
    let runningTime = gst_segment_to_running_time(segment, GST_FORMAT_TIME, buffer.pointee.pts)
    let clockTime = gst_clock_get_time(clock), baseTime = gst_element_get_base_time(element)
    guard runningTime != none, clockTime != none, clockTime >= baseTime else { return nil }
    return (UInt64(runningTime), UInt64(clockTime - baseTime))
}

/// A buffer as the gap rule sees it on arrival: stream time, DISCONT, clock.
private func arrival(_ trans: UnsafeMutableRawPointer, _ buffer: UnsafeMutablePointer<GstBuffer>,
                     _ timing: (runningTime: UInt64, now: UInt64)?) -> GapRule.Arrival {
    let none = shim_clock_time_none(), segment = segmentOf(trans), pts = buffer.pointee.pts
    var streamTime: UInt64?
    if pts != none {
        let time = segment.pointee.format == GST_FORMAT_TIME ? gst_segment_to_stream_time(segment, GST_FORMAT_TIME, pts) : pts
        streamTime = time == none ? nil : UInt64(time)
    }
    let discont = buffer.pointee.mini_object.flags & GST_BUFFER_FLAG_DISCONT.rawValue != 0
    return GapRule.Arrival(streamTime: streamTime, isDiscont: discont,
                           clock: timing.map { ($0.runningTime, $0.now) }, atMs: monotonicMs())
}

/// The QoS message of a frame dropped before work (as the base class posts for its own drops).
private func postDropped(_ trans: UnsafeMutableRawPointer, _ buffer: UnsafeMutablePointer<GstBuffer>, runningTime: UInt64,
                         late: UInt64, counts: (submitted: UInt, processed: UInt)) {
    let object = trans.assumingMemoryBound(to: GstObject.self)
    let segment = segmentOf(trans)
    let pts = buffer.pointee.pts
    let streamTime = gst_segment_to_stream_time(segment, GST_FORMAT_TIME, pts)
    guard let message = gst_message_new_qos(object, 1, GstClockTime(runningTime), streamTime, pts, buffer.pointee.duration) else { return }
    gst_message_set_qos_values(message, gint64(clamping: late), 1.0, 1_000_000)
    gst_message_set_qos_stats(message, GST_FORMAT_BUFFERS, counts.processed, counts.submitted &- counts.processed)
    gst_element_post_message(trans.assumingMemoryBound(to: GstElement.self), message)
}

/// For a `matanyone-reseed` event: its optional `mask` path (nil when absent or empty); nil for other events.
private func reseedRequest(_ event: UnsafeMutablePointer<GstEvent>) -> String?? {
    guard let structure = gst_event_get_structure(event),
          String(cString: gst_structure_get_name(structure)) == "matanyone-reseed" else { return nil }
    let mask = gst_structure_get_string(structure, "mask").map { String(cString: $0) } ?? ""
    return .some(mask.isEmpty ? nil : mask)
}

/// A sink pad event as a Swift value.
private func sinkEvent(_ event: UnsafeMutablePointer<GstEvent>) -> SinkEvent {
    switch event.pointee.type {
    case GST_EVENT_FLUSH_START: return .flushStart
    case GST_EVENT_FLUSH_STOP: return .flushStop
    case GST_EVENT_EOS: return .endOfStream
    case GST_EVENT_CAPS: return .caps
    case GST_EVENT_STREAM_START: return .streamStart
    case GST_EVENT_SEGMENT:
        var segment: UnsafePointer<GstSegment>?
        gst_event_parse_segment(event, &segment)
        return segment.map { .segment($0.pointee) } ?? .other(serialized: true)
    case GST_EVENT_CUSTOM_DOWNSTREAM, GST_EVENT_CUSTOM_DOWNSTREAM_OOB:
        return reseedRequest(event).map { .reseed(maskPath: $0, serialized: isSerialized(event)) } ?? .other(serialized: isSerialized(event))
    default: return .other(serialized: isSerialized(event))
    }
}

private func isSerialized(_ event: UnsafeMutablePointer<GstEvent>) -> Bool {
    event.pointee.type.rawValue & GST_EVENT_TYPE_SERIALIZED.rawValue != 0
}

/// A source pad event as a Swift value.
private func sourceEvent(_ event: UnsafeMutablePointer<GstEvent>) -> SourceEvent {
    switch event.pointee.type {
    case GST_EVENT_LATENCY:
        var latency: GstClockTime = 0
        gst_event_parse_latency(event, &latency)
        return .latency(UInt64(latency))
    case GST_EVENT_QOS: return .qos
    case GST_EVENT_CUSTOM_UPSTREAM:
        return reseedRequest(event).map { .reseed(maskPath: $0) } ?? .other
    default: return .other
    }
}

/// Class handler of the `reseed` action signal.
private let reseedSignalHandler: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Void = { instance, _ in
    filter(instance).requestReseed(maskPath: nil)
}

private func installSignals(_ klass: UnsafeMutableRawPointer) {
    let closure = g_cclosure_new(unsafeBitCast(reseedSignalHandler, to: GCallback.self), nil, nil)
    g_signal_newv("reseed", G_TYPE_FROM_CLASS_shim(klass), shim_signal_action(), closure, nil, nil, nil,
                  shim_type_none(), 0, nil)
}

private let instanceInit: GInstanceInitFunc = { instance, _ in
    let raw = UnsafeMutableRawPointer(instance!).assumingMemoryBound(to: GstMatAnyone.self)
    let handle = ElementHandle(raw: raw)
    raw.pointee.impl = Unmanaged.passRetained(MatteFilter(handle: handle)).toOpaque()
    gst_base_transform_set_qos_enabled(handle.transform, 1)
}

private let finalizeTrampoline: @convention(c) (UnsafeMutablePointer<GObject>?) -> Void = { object in
    let raw = UnsafeMutableRawPointer(object!).assumingMemoryBound(to: GstMatAnyone.self)
    if let impl = raw.pointee.impl {
        Unmanaged<MatteFilter>.fromOpaque(impl).takeUnretainedValue().finalizing()
        Unmanaged<MatteFilter>.fromOpaque(impl).release()
        raw.pointee.impl = nil
    }
    parentObjectClass.pointee.finalize(object)
}

// MARK: - Properties

private func installProperties(_ objectClass: UnsafeMutablePointer<GObjectClass>) {
    for (index, declaration) in PropertyDeclaration.all.enumerated() {
        let flags = declaration.mutability == .ready ? shim_param_readwrite_ready() : shim_param_readwrite_playing()
        let spec: UnsafeMutablePointer<GParamSpec>
        switch declaration.kind {
        case let .enumeration(typeName, defaultValue):
            spec = g_param_spec_enum(declaration.name, declaration.nick, declaration.blurb,
                                     enumTypes[typeName]!, gint(defaultValue), flags)
        case let .string(defaultValue):
            spec = g_param_spec_string(declaration.name, declaration.nick, declaration.blurb, defaultValue, flags)
        case let .uint(minimum, maximum, defaultValue):
            spec = g_param_spec_uint(declaration.name, declaration.nick, declaration.blurb,
                                     minimum, maximum, defaultValue, flags)
        case let .double(minimum, maximum, defaultValue):
            spec = g_param_spec_double(declaration.name, declaration.nick, declaration.blurb,
                                       minimum, maximum, defaultValue, flags)
        }
        g_object_class_install_property(objectClass, guint(index + 1), spec)
    }
}

private let setPropertyTrampoline:
    @convention(c) (UnsafeMutablePointer<GObject>?, guint, UnsafePointer<GValue>?, UnsafeMutablePointer<GParamSpec>?) -> Void = {
        object, id, value, spec in
        guard let declaration = PropertyDeclaration.with(id: id) else { return }
        let converted: PropertyValue
        switch declaration.kind {
        case .enumeration: converted = .enumeration(Int32(g_value_get_enum(value)))
        case .string: converted = .string(g_value_get_string(value).map { String(cString: $0) } ?? "")
        case .uint: converted = .uint(g_value_get_uint(value))
        case .double: converted = .double(g_value_get_double(value))
        }
        if filter(object).setProperty(declaration, converted) { g_object_notify_by_pspec(object, spec) }
    }

private let getPropertyTrampoline:
    @convention(c) (UnsafeMutablePointer<GObject>?, guint, UnsafeMutablePointer<GValue>?, UnsafeMutablePointer<GParamSpec>?) -> Void = {
        object, id, value, _ in
        guard let declaration = PropertyDeclaration.with(id: id) else { return }
        switch filter(object).property(declaration) {
        case let .enumeration(raw): g_value_set_enum(value, gint(raw))
        case let .string(text): g_value_set_string(value, text)
        case let .uint(number): g_value_set_uint(value, number)
        case let .double(number): g_value_set_double(value, number)
        }
    }

// MARK: - Plugin

private let pluginInit: GstPluginInitFunc = { plugin in
    if let plugin { AbandonedLoads.waitAtDeinit(of: plugin) }
    return gst_element_register(plugin, "matanyone", guint(GST_RANK_NONE.rawValue), matAnyoneType)
}

public enum MatAnyonePlugin {
    static let version = "0.1.0"

    /// The descriptor the loader finds through `gst_plugin_matanyone_get_desc`; lives for the process.
    public static let descriptor: UnsafeMutablePointer<GstPluginDesc> = {
        let desc = UnsafeMutablePointer<GstPluginDesc>.allocate(capacity: 1)
        desc.initialize(to: GstPluginDesc())
        desc.pointee.major_version = gint(shim_gst_version_major())
        desc.pointee.minor_version = gint(shim_gst_version_minor())
        desc.pointee.name = UnsafePointer(strdup("matanyone"))
        desc.pointee.description = UnsafePointer(strdup("Live human video matting with MatAnyone2"))
        desc.pointee.plugin_init = pluginInit
        desc.pointee.version = UnsafePointer(strdup(version))
        desc.pointee.license = UnsafePointer(strdup("LGPL"))
        desc.pointee.source = UnsafePointer(strdup("gst-matanyone"))
        desc.pointee.package = UnsafePointer(strdup("gst-matanyone"))
        desc.pointee.origin = UnsafePointer(strdup("gst-matanyone"))
        return desc
    }()

    /// Registers the element in this process without loading the `.so` (for in-process tests).
    @discardableResult
    public static func registerStatic() -> Bool {
        gst_plugin_register_static(
            gint(shim_gst_version_major()), gint(shim_gst_version_minor()), "matanyone",
            "Live human video matting with MatAnyone2", pluginInit, version, "LGPL", "gst-matanyone",
            "gst-matanyone", "gst-matanyone") != 0
    }
}
