/// Everything that can go wrong inside the engine, classified so that the element can map each case to
/// one GStreamer error domain (see `MatteElement/ErrorMapping.swift`). Every message names the thing at
/// fault and, where one exists, the fix.
public enum EngineError: Error, CustomStringConvertible, Equatable {
    /// A model folder, manifest or model file does not exist.
    case modelMissing(path: String, hint: String)
    /// A model set exists but is unusable: corrupt file, manifest that disagrees with the file.
    case modelInvalid(path: String, detail: String)
    /// The ONNX Runtime library cannot be found or loaded, or refuses to initialise.
    case runtimeUnavailable(detail: String)
    /// A setting is out of range or contradicts the model set.
    case badSettings(detail: String)
    /// A model failed while running on a frame.
    case inference(detail: String)
    /// An input file the user named (e.g. a seed mask) does not exist.
    case fileMissing(path: String, hint: String)
    /// An input file the user named cannot be read or decoded.
    case fileUnreadable(path: String, detail: String)

    public var description: String {
        switch self {
        case let .modelMissing(path, hint): return "model not found: \(path). \(hint)"
        case let .modelInvalid(path, detail): return "unusable model at \(path): \(detail)"
        case let .runtimeUnavailable(detail): return "ONNX Runtime unavailable: \(detail)"
        case let .badSettings(detail): return "invalid settings: \(detail)"
        case let .inference(detail): return "inference failed: \(detail)"
        case let .fileMissing(path, hint): return "file not found: \(path). \(hint)"
        case let .fileUnreadable(path, detail): return "cannot read \(path): \(detail)"
        }
    }
}

/// The command a user runs to (re)install the runtime and models; quoted in error messages.
public let setupHint = "Run scripts/setup.sh from the gst-matanyone checkout to install it."
