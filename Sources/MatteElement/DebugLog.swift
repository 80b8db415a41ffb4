import CGStreamer
import MatteEngine

/// The `matanyone` debug category (`GST_DEBUG=matanyone:6`): negotiation and model loading at
/// INFO/DEBUG, per-frame decisions at LOG, and ONNX Runtime's own log routed in.
enum DebugLog {
    static let category: UnsafeMutablePointer<GstDebugCategory> =
        _gst_debug_category_new("matanyone", 0, "MatAnyone human video matting")

    static func isEnabled(_ level: GstDebugLevel) -> Bool {
        gst_debug_category_get_threshold(category).rawValue >= level.rawValue
    }

    /// Logs `message` (built only when the category's threshold lets it through).
    static func log(_ level: GstDebugLevel, _ element: ElementHandle?, _ message: @autoclosure () -> String,
                    file: String = #fileID, function: String = #function, line: Int = #line) {
        guard isEnabled(level) else { return }
        gst_debug_log_literal(category, level, file, function, Int32(line), element.map { $0.gobject }, message())
    }

    /// Routes the engine's and ONNX Runtime's log lines into this category (once per process).
    static let routeEngineLog: Void = {
        let verbose = isEnabled(GST_LEVEL_LOG)
        EngineLog.install(minimum: verbose ? .verbose : .warning) { level, text in
            let mapped: GstDebugLevel
            switch level {
            case .verbose: mapped = GST_LEVEL_LOG
            case .info: mapped = GST_LEVEL_INFO
            case .warning: mapped = GST_LEVEL_WARNING
            case .error: mapped = GST_LEVEL_ERROR
            }
            DebugLog.log(mapped, nil, text, file: "onnxruntime", function: "", line: 0)
        }
    }()
}
