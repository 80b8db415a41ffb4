import COnnxRuntime
import Foundation

/// Where the engine's own log lines and ONNX Runtime's go: the element installs a sink that writes
/// into its GStreamer debug category; without one they are dropped. The engine never sees GStreamer.
public enum EngineLog {
    public enum Level: Int, Comparable, Sendable {
        case verbose, info, warning, error
        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
    }

    public typealias Sink = @Sendable (Level, String) -> Void

    private static let lock = NSLock()
    nonisolated(unsafe) private static var sink: Sink?
    nonisolated(unsafe) private static var minimum = Level.warning

    /// Installs the sink; lines below `minimum` are not produced (ONNX Runtime's level is set from it
    /// when a runtime is first loaded).
    public static func install(minimum: Level, _ newSink: @escaping Sink) {
        lock.lock()
        defer { lock.unlock() }
        sink = newSink
        self.minimum = minimum
    }

    static var minimumLevel: Level {
        lock.lock()
        defer { lock.unlock() }
        return minimum
    }

    static func write(_ level: Level, _ text: @autoclosure () -> String) {
        lock.lock()
        let current = level >= minimum ? sink : nil
        lock.unlock()
        current?(level, text())
    }

    /// ONNX Runtime's severity → ours, and the level to create its environment with.
    static func level(of severity: OrtLoggingLevel) -> Level {
        switch severity {
        case ORT_LOGGING_LEVEL_VERBOSE: return .verbose
        case ORT_LOGGING_LEVEL_INFO: return .info
        case ORT_LOGGING_LEVEL_WARNING: return .warning
        default: return .error
        }
    }

    static var runtimeLevel: OrtLoggingLevel {
        switch minimumLevel {
        case .verbose: return ORT_LOGGING_LEVEL_VERBOSE
        case .info: return ORT_LOGGING_LEVEL_INFO
        case .warning: return ORT_LOGGING_LEVEL_WARNING
        case .error: return ORT_LOGGING_LEVEL_ERROR
        }
    }

    /// ONNX Runtime's custom logger (any of its threads).
    static let runtimeCallback: OrtLoggingFunction = { _, severity, category, _, location, message in
        let text = message.map { String(cString: $0) } ?? ""
        let origin = [category, location].compactMap { $0.map { String(cString: $0) } }.joined(separator: " ")
        write(level(of: severity), "onnxruntime [\(origin)] \(text)")
    }
}
