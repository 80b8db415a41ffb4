import CGStreamer
import MatteEngine

/// The one place where engine failures become GStreamer errors. Domains and codes:
/// missing model or input file → RESOURCE/NOT_FOUND; unreadable file → RESOURCE/OPEN_READ; an
/// inference server out of reach → RESOURCE/OPEN_READ_WRITE, refusing us → RESOURCE/NOT_AUTHORIZED; unusable
/// model or runtime, a GPU provider that cannot run → LIBRARY/INIT; bad settings → LIBRARY/SETTINGS; a failure on a frame →
/// STREAM/FAILED; a buffer that does not match its caps → STREAM/FORMAT. The element's own refusals
/// (`ElementError`) map here too.
enum ErrorMapping {
    static func domainAndCode(for error: EngineError) -> (GQuark, Int32) {
        switch error {
        case .modelMissing, .fileMissing:
            return (gst_resource_error_quark(), Int32(GST_RESOURCE_ERROR_NOT_FOUND.rawValue))
        case .fileUnreadable:
            return (gst_resource_error_quark(), Int32(GST_RESOURCE_ERROR_OPEN_READ.rawValue))
        case .serverUnavailable:
            return (gst_resource_error_quark(), Int32(GST_RESOURCE_ERROR_OPEN_READ_WRITE.rawValue))
        case .serverRefused:
            return (gst_resource_error_quark(), Int32(GST_RESOURCE_ERROR_NOT_AUTHORIZED.rawValue))
        case .modelInvalid, .runtimeUnavailable, .runtimeFailure, .gpuUnavailable:
            return (gst_library_error_quark(), Int32(GST_LIBRARY_ERROR_INIT.rawValue))
        case .badSettings:
            return (gst_library_error_quark(), Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
        case .inference:
            return (gst_stream_error_quark(), Int32(GST_STREAM_ERROR_FAILED.rawValue))
        }
    }

    static func domainAndCode(for error: ElementError) -> (GQuark, Int32) {
        switch error {
        case .sizesDiffer, .unsupportedOutputFormat:
            return (gst_library_error_quark(), Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
        case .streamFormat:
            return (gst_stream_error_quark(), Int32(GST_STREAM_ERROR_FORMAT.rawValue))
        case .streamFailed:
            return (gst_stream_error_quark(), Int32(GST_STREAM_ERROR_FAILED.rawValue))
        }
    }

    /// Posts an ERROR message on the bus for `error`: the element's own, or the engine's (any other
    /// error counts as STREAM/FAILED).
    static func postError(_ error: Error, on element: ElementHandle, file: String = #fileID, function: String = #function, line: Int = #line) {
        let (domain, code): (GQuark, Int32), text: String, debug: String
        if let own = error as? ElementError {
            (domain, code) = domainAndCode(for: own)
            (text, debug) = (own.description, own.description)
        } else {
            let engineError = EngineError.classify(error, during: .processing)
            (domain, code) = domainAndCode(for: engineError)
            (text, debug) = (engineError.description, "\(engineError)")
        }
        DebugLog.log(GST_LEVEL_ERROR, element, debug, file: file, function: function, line: line)
        post(GST_MESSAGE_ERROR, domain: domain, code: code, text: text, debug: debug, on: element, file: file, function: function, line: line)
    }

    /// Runs a vfunc's work: true when it succeeded; what it threw is posted (ERROR) and false returned.
    static func succeeded(on element: ElementHandle, file: String = #fileID, function: String = #function, line: Int = #line,
                          _ body: () throws -> Void) -> Bool {
        do {
            try body()
            return true
        } catch {
            postError(error, on: element, file: file, function: function, line: line)
            return false
        }
    }

    /// Posts a WARNING (the element carries on).
    static func postWarning(_ text: String, on element: ElementHandle, file: String = #fileID, function: String = #function, line: Int = #line) {
        post(GST_MESSAGE_WARNING, domain: gst_stream_error_quark(), code: Int32(GST_STREAM_ERROR_FAILED.rawValue),
             text: text, debug: text, on: element, file: file, function: function, line: line)
    }

    /// Posts what the engine says of its surroundings: the inference server lost (a WARNING: frames
    /// carry on without a matte) or its stream forgotten (a WARNING: the tracks start over), back
    /// again (an INFO message).
    static func post(_ notice: EngineNotice, on element: ElementHandle, file: String = #fileID, function: String = #function, line: Int = #line) {
        switch notice {
        case let .serverLost(server, detail):
            postWarning("inference server \(server) does not answer (\(detail)): frames leave with no-person-alpha while the "
                        + "element retries (every 0.25 s at first, backing off to 8 s)", on: element, file: file, function: function, line: line)
        case let .serverForgotStream(server, detail):
            postWarning("inference server \(server) no longer holds this stream (\(detail)): the tracks start over from a new seed",
                        on: element, file: file, function: function, line: line)
        case let .serverBack(server, afterMs):
            let text = "inference server \(server) answers again, after \(Int(afterMs.rounded())) ms without"
            post(GST_MESSAGE_INFO, domain: gst_stream_error_quark(), code: Int32(GST_STREAM_ERROR_FAILED.rawValue),
                 text: text, debug: text, on: element, file: file, function: function, line: line)
        }
    }

    private static func post(_ type: GstMessageType, domain: GQuark, code: Int32, text: String, debug: String,
                             on element: ElementHandle, file: String, function: String, line: Int) {
        // text and debug are transfer-full. The caller's place, not this file's: the debug line then
        // says where the element decided to fail.
        gst_element_message_full(element.element, type, domain, code, g_strdup(text), g_strdup(debug),
                                 file, function, Int32(line))
    }
}

/// What the element itself refuses, as opposed to what the engine reports (`EngineError`); posted
/// through `ErrorMapping.postError`.
enum ElementError: Error, CustomStringConvertible {
    /// Caps whose input and output sizes differ (LIBRARY/SETTINGS).
    case sizesDiffer
    /// An output format the element does not make (LIBRARY/SETTINGS).
    case unsupportedOutputFormat
    /// Input the element cannot read or write as negotiated: a buffer that does not match its caps,
    /// interlaced caps (STREAM/FORMAT).
    case streamFormat(String)
    /// A frame's step that failed where the caps were fine: a buffer that cannot be mapped, an
    /// output buffer that cannot be had (STREAM/FAILED).
    case streamFailed(String)

    var description: String {
        switch self {
        // (Worded as the settings errors the engine reports.)
        case .sizesDiffer: return "invalid settings: input and output sizes differ"
        case .unsupportedOutputFormat: return "invalid settings: unsupported output format"
        case let .streamFormat(text), let .streamFailed(text): return text
        }
    }
}
