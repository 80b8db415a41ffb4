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
    /// A GPU execution provider was asked for and cannot run: each problem names what is missing and the fix.
    case gpuUnavailable(provider: String, problems: [String])
    /// An ONNX Runtime call failed while the engine was being set up (not a model file's fault).
    case runtimeFailure(call: String, detail: String)
    /// A setting is out of range or contradicts the model set.
    case badSettings(detail: String)
    /// A model failed while running on a frame.
    case inference(detail: String)
    /// An input file the user named (e.g. a seed mask) does not exist.
    case fileMissing(path: String, hint: String)
    /// An input file the user named cannot be read or decoded.
    case fileUnreadable(path: String, detail: String)
    /// The inference server cannot be reached, or refuses the connection (TLS).
    case serverUnavailable(url: String, detail: String)
    /// The inference server (or a proxy before it) refuses this client: not authorised.
    case serverRefused(url: String, detail: String)

    public var description: String {
        switch self {
        case let .modelMissing(path, hint): return "model not found: \(path). \(hint)"
        case let .modelInvalid(path, detail): return "unusable model at \(path): \(detail)"
        case let .runtimeUnavailable(detail): return "ONNX Runtime unavailable: \(detail)"
        case let .gpuUnavailable(provider, problems):
            return "execution-provider=\(provider) cannot run: " + problems.joined(separator: "; ")
        case let .runtimeFailure(call, detail): return "ONNX Runtime's \(call) failed: \(detail)"
        case let .badSettings(detail): return "invalid settings: \(detail)"
        case let .inference(detail): return "inference failed: \(detail)"
        case let .fileMissing(path, hint): return "file not found: \(path). \(hint)"
        case let .fileUnreadable(path, detail): return "cannot read \(path): \(detail)"
        case let .serverUnavailable(url, detail): return "inference server \(url) unavailable: \(detail)"
        case let .serverRefused(url, detail): return "inference server \(url) refused the element: \(detail)"
        }
    }
}

/// The command a user runs to (re)install the runtime and models; quoted in error messages.
public let setupHint = "Run scripts/setup.sh from the gst-matanyone checkout to install it."

/// A failed ONNX Runtime call, as the runtime owners throw it: which call, its message, and the model
/// it concerned. Neutral on purpose: `EngineError.classify` decides once, at the engine boundary,
/// what it means for the user.
public struct RuntimeCallError: Error, CustomStringConvertible, Equatable {
    public let call: String
    public let message: String
    /// The model's name and file, when the call concerned one.
    public var model: String?
    public var file: String?

    public init(call: String, message: String, model: String? = nil, file: String? = nil) {
        self.call = call
        self.message = message
        self.model = model
        self.file = file
    }

    public var description: String {
        (model.map { "model '\($0)': " } ?? "") + "\(call) failed: \(message)"
    }
}

/// Where an engine was when something failed: the same runtime failure is a broken model set while
/// starting and a failing frame while processing.
public enum EnginePhase: Sendable {
    case starting
    case processing
}

extension EngineError {
    /// The one classification of a failure leaving an engine (see `RuntimeCallError`).
    public static func classify(_ error: Error, during phase: EnginePhase) -> EngineError {
        switch (error, phase) {
        case let (engineError as EngineError, _):
            return engineError
        case let (call as RuntimeCallError, .starting) where call.call == "CreateSession":
            return .modelInvalid(path: call.file ?? call.model ?? "model",
                                 detail: "ONNX Runtime cannot load it (\(call.message)). " + setupHint)
        case let (call as RuntimeCallError, .starting):
            return .runtimeFailure(call: call.call, detail: (call.model.map { "model '\($0)': " } ?? "") + call.message)
        case let (call as RuntimeCallError, .processing):
            return .inference(detail: call.description)
        case (_, .starting):
            return .runtimeFailure(call: "setup", detail: "\(error)")
        case (_, .processing):
            return .inference(detail: "\(error)")
        }
    }

    /// Runs `body`, classifying whatever it throws (engine entry points wrap their work in this).
    public static func boundary<T>(_ phase: EnginePhase, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw classify(error, during: phase)
        }
    }
}
