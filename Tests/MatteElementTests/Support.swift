import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import MatteEngine
import TestPaths

/// gst_init and static registration, once per process (Swift Testing runs tests in parallel).
let gstreamerReady: Bool = {
    gst_init(nil, nil)
    return MatAnyonePlugin.registerStatic()
}()

/// Whether this process runs under ThreadSanitizer (its runtime is linked in): timing bounds there
/// measure the sanitizer, not the element.
let underThreadSanitizer = dlsym(nil, "__tsan_init") != nil

extension TestPaths {
    /// The segmenter element with the test model folder (engine=auto would pick MatAnyone2 there).
    static var element: String { "matanyone engine=segmenter model-dir=\"\(modelDir)\"" }
}

/// An error message read off the bus.
struct BusError {
    let domain: String
    let code: Int32
    let message: String
    let debug: String
}

/// What a pipeline run produced.
struct PipelineRun {
    var error: BusError?
    var warnings: [String] = []
    var elementMessages: [[String: String]] = []
    var reachedEOS = false
    var latencyMessages = 0
    var samples: [[UInt8]] = []
    var caps: [String] = []
}

/// Runs `description` (with an optional `appsink name=out`) to EOS, ERROR or the timeout.
func runPipeline(_ description: String, timeout: Double = 60, before: ((UnsafeMutablePointer<GstElement>) -> Void)? = nil,
                 whilePlaying: ((UnsafeMutablePointer<GstElement>) -> Void)? = nil) -> PipelineRun {
    precondition(gstreamerReady)
    var parseError: UnsafeMutablePointer<GError>?
    guard let pipeline = gst_parse_launch(description, &parseError) else {
        let text = parseError.map { String(cString: $0.pointee.message) } ?? "?"
        return PipelineRun(error: BusError(domain: "parse", code: -1, message: text, debug: ""))
    }
    EngineWrappers.inject(into: pipeline)
    defer {
        gst_element_set_state(pipeline, GST_STATE_NULL)
        gst_object_unref(pipeline)
    }
    before?(pipeline)
    let bus = gst_element_get_bus(pipeline)!
    defer { gst_object_unref(bus) }
    let sinkElement = gst_bin_get_by_name(UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self), "out")
    defer { if let sinkElement { gst_object_unref(sinkElement) } }
    var run = PipelineRun()
    gst_element_set_state(pipeline, GST_STATE_PLAYING)
    var calledWhilePlaying = false
    let deadline = Date().addingTimeInterval(timeout)
    func drainSink() {
        guard let sinkElement else { return }
        let sink = UnsafeMutableRawPointer(sinkElement).assumingMemoryBound(to: GstAppSink.self)
        while let sample = gst_app_sink_try_pull_sample(sink, 0) {
            if let caps = gst_sample_get_caps(sample), let text = gst_caps_to_string(caps) {
                run.caps.append(String(cString: text))
                g_free(text)
            }
            if let buffer = gst_sample_get_buffer(sample) {
                var map = GstMapInfo()
                if gst_buffer_map(buffer, &map, GST_MAP_READ) != 0 {
                    run.samples.append(Array(UnsafeBufferPointer(start: map.data, count: Int(map.size))))
                    gst_buffer_unmap(buffer, &map)
                }
            }
            gst_sample_unref(sample)
        }
    }
    loop: while Date() < deadline {
        drainSink()
        guard let message = gst_bus_timed_pop(bus, 20_000_000) else {
            if !calledWhilePlaying, let whilePlaying {
                var state = GST_STATE_NULL, pending = GST_STATE_NULL
                gst_element_get_state(pipeline, &state, &pending, 0)
                if state == GST_STATE_PLAYING {
                    calledWhilePlaying = true
                    whilePlaying(pipeline)
                }
            }
            continue
        }
        defer { gst_message_unref(message) }
        switch message.pointee.type {
        case GST_MESSAGE_EOS:
            run.reachedEOS = true
            break loop
        case GST_MESSAGE_ERROR, GST_MESSAGE_WARNING:
            var error: UnsafeMutablePointer<GError>?
            var debug: UnsafeMutablePointer<gchar>?
            if message.pointee.type == GST_MESSAGE_ERROR {
                gst_message_parse_error(message, &error, &debug)
            } else {
                gst_message_parse_warning(message, &error, &debug)
            }
            let text = String(cString: error!.pointee.message)
            if message.pointee.type == GST_MESSAGE_ERROR {
                run.error = BusError(domain: String(cString: g_quark_to_string(error!.pointee.domain)),
                                     code: error!.pointee.code, message: text,
                                     debug: debug.map { String(cString: $0) } ?? "")
            } else {
                run.warnings.append(text)
            }
            g_error_free(error)
            g_free(debug)
            if message.pointee.type == GST_MESSAGE_ERROR { break loop }
        case GST_MESSAGE_ELEMENT:
            if let structure = gst_message_get_structure(message) {
                var fields = structureFields(structure)
                fields["name"] = String(cString: gst_structure_get_name(structure))
                run.elementMessages.append(fields)
            }
        case GST_MESSAGE_LATENCY:
            run.latencyMessages += 1
        default:
            break
        }
    }
    drainSink()
    return run
}

/// The texts of the WARNING messages waiting on `bus` (popped).
func popWarnings(_ bus: UnsafeMutablePointer<GstBus>) -> [String] {
    var texts: [String] = []
    while let message = gst_bus_pop_filtered(bus, GST_MESSAGE_WARNING) {
        var error: UnsafeMutablePointer<GError>?
        gst_message_parse_warning(message, &error, nil)
        if let error {
            texts.append(String(cString: error.pointee.message))
            g_error_free(error)
        }
        gst_message_unref(message)
    }
    return texts
}

/// Resident set size of this process, in bytes.
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// A structure's fields, serialised as gst-launch-1.0 prints them.
func structureFields(_ structure: UnsafePointer<GstStructure>) -> [String: String] {
    var fields: [String: String] = [:]
    for index in 0..<gst_structure_n_fields(structure) {
        let field = gst_structure_nth_field_name(structure, guint(index))!
        if let value = gst_structure_get_value(structure, field), let text = gst_value_serialize(value) {
            fields[String(cString: field)] = String(cString: text)
            g_free(text)
        }
    }
    return fields
}

/// Parses `description`, sets it PLAYING and hands its pipeline and bus to `body`; tears it down
/// after. nil when the description does not parse.
func withPlayingPipeline<Result>(_ description: String,
                                 _ body: (UnsafeMutablePointer<GstElement>, UnsafeMutablePointer<GstBus>) throws -> Result) rethrows -> Result? {
    precondition(gstreamerReady)
    var parseError: UnsafeMutablePointer<GError>?
    guard let pipeline = gst_parse_launch(description, &parseError) else {
        if let parseError { g_error_free(parseError) }
        return nil
    }
    EngineWrappers.inject(into: pipeline)
    defer {
        gst_element_set_state(pipeline, GST_STATE_NULL)
        gst_object_unref(pipeline)
    }
    let bus = gst_element_get_bus(pipeline)!
    defer { gst_object_unref(bus) }
    gst_element_set_state(pipeline, GST_STATE_PLAYING)
    return try body(pipeline, bus)
}

/// An object's name (gst_object_get_name's copy freed).
func objectName(_ object: UnsafeMutablePointer<GstObject>?) -> String {
    guard let object, let name = gst_object_get_name(object) else { return "" }
    defer { g_free(name) }
    return String(cString: name)
}

/// The largest difference between two planes, byte for byte.
func maxDifference(_ a: [UInt8], _ b: [UInt8]) -> Int { zip(a, b).map { abs(Int($0) - Int($1)) }.max() ?? 0 }

/// The GRAY8 outputs of a harnessed element (`description`, named `m`) for `frame` (one 512×288 BGRA
/// frame) pushed `pushes` times; `between` runs before each push with the element and the index,
/// `afterPushes` after the last output was pulled, right before the harness stops the element.
func harnessOutputs(_ description: String, frame: [UInt8], pushes: Int, bus: UnsafeMutablePointer<GstBus>? = nil,
                    between: ((UnsafeMutablePointer<GstElement>, Int) -> Void)? = nil,
                    afterPushes: ((UnsafeMutablePointer<GstElement>) -> Void)? = nil) throws -> [[UInt8]] {
    precondition(gstreamerReady)
    let harness = gst_harness_new_parse(description)!
    defer { gst_harness_teardown(harness) }
    if let bus { gst_element_set_bus(harness.pointee.element, bus) }
    gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=512,height=288,framerate=25/1")
    gst_harness_set_sink_caps_str(harness, "video/x-raw,format=GRAY8,width=512,height=288,framerate=25/1")
    // gst_harness_new_parse wraps the element in a bin.
    let bin = UnsafeMutableRawPointer(harness.pointee.element).assumingMemoryBound(to: GstBin.self)
    let element = try #require(gst_bin_get_by_name(bin, "m"))
    defer { gst_object_unref(element) }
    var outputs: [[UInt8]] = []
    for index in 0..<pushes {
        between?(element, index)
        let buffer = gst_buffer_new_allocate(nil, gsize(frame.count), nil)!
        _ = frame.withUnsafeBufferPointer { gst_buffer_fill(buffer, 0, $0.baseAddress, gsize($0.count)) }
        #expect(gst_harness_push(harness, buffer) == GST_FLOW_OK)
        let out = try #require(gst_harness_pull(harness))
        var map = GstMapInfo()
        gst_buffer_map(out, &map, GST_MAP_READ)
        outputs.append(Array(UnsafeBufferPointer(start: map.data, count: Int(map.size))))
        gst_buffer_unmap(out, &map)
        gst_buffer_unref(out)
    }
    afterPushes?(element)
    return outputs
}
