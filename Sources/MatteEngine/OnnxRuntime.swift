import COnnxRuntime
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Typed owners over ONNX Runtime's C API. The library is `dlopen`ed on first use so that the plugin
/// loads (and `gst-inspect-1.0` works) on machines without it, and so a user can point at another build
/// (e.g. the GPU one). The header is Debian's 1.21 one: the C API is append-only, so asking a newer
/// library for `ORT_API_VERSION` works.
public final class OnnxRuntime {
    let api: UnsafePointer<OrtApi>
    let env: OpaquePointer
    let cpuMemory: OpaquePointer
    public let libraryPath: String
    public let version: String

    private static let lock = NSLock()
    private static var loaded: [String: OnnxRuntime] = [:]

    /// Where set-up installs the library (beside the models, never on the system path).
    public static var defaultLibraryPath: String {
        ModelLocations.dataRoot + "/onnxruntime/libonnxruntime.so.1"
    }

    /// Where `scripts/setup.sh --gpu` installs the GPU build.
    public static var gpuLibraryPath: String {
        ModelLocations.dataRoot + "/onnxruntime-gpu/libonnxruntime.so.1"
    }

    /// Loads (once per process and path) the runtime. `explicitPath` empty means: the
    /// `MATANYONE_ONNXRUNTIME` variable, else the set-up location, else the system search path.
    public static func shared(explicitPath: String = "") throws -> OnnxRuntime {
        var candidates: [String] = []
        if !explicitPath.isEmpty {
            candidates = [explicitPath]
        } else if let fromEnv = ProcessInfo.processInfo.environment["MATANYONE_ONNXRUNTIME"], !fromEnv.isEmpty {
            candidates = [fromEnv]
        } else {
            // The GPU build (scripts/setup.sh --gpu) when installed, then the CPU one, then the system's.
            let gpu = FileManager.default.fileExists(atPath: gpuLibraryPath) ? [gpuLibraryPath] : []
            candidates = gpu + [defaultLibraryPath, "libonnxruntime.so.1"]
        }
        lock.lock()
        defer { lock.unlock() }
        for path in candidates {
            if let runtime = loaded[path] { return runtime }
        }
        var failures: [String] = []
        for path in candidates {
            do {
                let runtime = try OnnxRuntime(path: path)
                loaded[path] = runtime
                return runtime
            } catch let EngineError.runtimeUnavailable(detail) {
                failures.append(detail)
            }
        }
        throw EngineError.runtimeUnavailable(
            detail: failures.joined(separator: "; ") + ". " + setupHint
                + " Or set the element's runtime-library property (or MATANYONE_ONNXRUNTIME) to a libonnxruntime.so.")
    }

    private init(path: String) throws {
        // The PyPI build of the library phones home from CreateEnv unless this is set before it loads.
        setenv("ORT_DISABLE_TELEMETRY", "1", 1)
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "unknown dlopen error"
            throw EngineError.runtimeUnavailable(detail: "cannot load \(path) (\(reason))")
        }
        guard let symbol = dlsym(handle, "OrtGetApiBase") else {
            throw EngineError.runtimeUnavailable(detail: "\(path) is not ONNX Runtime (no OrtGetApiBase)")
        }
        typealias GetApiBase = @convention(c) () -> UnsafePointer<OrtApiBase>?
        let getApiBase = unsafeBitCast(symbol, to: GetApiBase.self)
        guard let base = getApiBase(), let getApi = base.pointee.GetApi,
              let versionString = base.pointee.GetVersionString
        else {
            throw EngineError.runtimeUnavailable(detail: "\(path) returned no API base")
        }
        let version = versionString().map { String(cString: $0) } ?? "unknown"
        guard let api = getApi(UInt32(ORT_API_VERSION)) else {
            throw EngineError.runtimeUnavailable(
                detail: "\(path) is ONNX Runtime \(version), older than the 1.\(ORT_API_VERSION) API this plugin needs")
        }
        var env: OpaquePointer?
        try OnnxRuntime.check(api, api.pointee.CreateEnv(ORT_LOGGING_LEVEL_ERROR, "matanyone", &env))
        guard let env else { throw EngineError.runtimeUnavailable(detail: "CreateEnv returned nothing") }
        _ = api.pointee.DisableTelemetryEvents(env)
        var memory: OpaquePointer?
        try OnnxRuntime.check(api, api.pointee.CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &memory))
        self.api = api
        self.env = env
        self.cpuMemory = memory!
        self.libraryPath = path
        self.version = version
    }

    /// Providers compiled into the loaded library, e.g. ["CUDAExecutionProvider", "CPUExecutionProvider"].
    public func availableProviders() -> [String] {
        var list: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        var count: Int32 = 0
        guard (try? check(api.pointee.GetAvailableProviders(&list, &count))) != nil, let list else { return [] }
        defer { _ = api.pointee.ReleaseAvailableProviders(list, count) }
        return (0..<Int(count)).compactMap { list[$0].map { String(cString: $0) } }
    }

    static func check(_ api: UnsafePointer<OrtApi>, _ status: OpaquePointer?) throws {
        guard let status else { return }
        let message = api.pointee.GetErrorMessage(status).map { String(cString: $0) } ?? "unknown error"
        api.pointee.ReleaseStatus(status)
        throw EngineError.runtimeUnavailable(detail: message)
    }

    func check(_ status: OpaquePointer?) throws { try OnnxRuntime.check(api, status) }
}

/// Execution providers the element can ask for.
public enum ExecutionProvider: String, CaseIterable, Sendable {
    case cpu, cuda, tensorrt, openvino
    /// The best one the loaded runtime has (TensorRT, CUDA, OpenVINO), else CPU.
    case auto

    var ortName: String {
        switch self {
        case .cpu: return "CPUExecutionProvider"
        case .cuda: return "CUDAExecutionProvider"
        case .tensorrt: return "TensorrtExecutionProvider"
        case .openvino: return "OpenVINOExecutionProvider"
        case .auto: return ""
        }
    }
}

/// How a session should run: per-session thread pool with spinning off (several sessions run one after
/// another on few cores; spinning threads of idle sessions would steal the cores of the busy one).
public struct SessionConfig: Equatable, Sendable {
    public var threads: Int = 0
    public var provider: ExecutionProvider = .cpu
    public init(threads: Int = 0, provider: ExecutionProvider = .cpu) {
        self.threads = threads
        self.provider = provider
    }
}

/// A float32 tensor whose storage we own; wraps it as an OrtValue once, so runs reuse both.
public final class Tensor {
    public let shape: [Int]
    public let count: Int
    public let data: UnsafeMutablePointer<Float>
    let value: OpaquePointer

    public init(runtime: OnnxRuntime, shape: [Int]) throws {
        self.shape = shape
        count = shape.reduce(1, *)
        data = .allocate(capacity: max(count, 1))
        data.initialize(repeating: 0, count: max(count, 1))
        var dims = shape.map { Int64($0) }
        var created: OpaquePointer?
        let status = runtime.api.pointee.CreateTensorWithDataAsOrtValue(
            runtime.cpuMemory, data, count * MemoryLayout<Float>.size, &dims, dims.count,
            ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &created)
        do {
            try runtime.check(status)
        } catch {
            data.deallocate()
            throw error
        }
        value = created!
        api = runtime.api
    }

    private let api: UnsafePointer<OrtApi>

    deinit {
        api.pointee.ReleaseValue(value)
        data.deallocate()
    }

    public var buffer: UnsafeMutableBufferPointer<Float> { UnsafeMutableBufferPointer(start: data, count: count) }

    public func copy(from other: Tensor) {
        precondition(other.count == count)
        data.update(from: other.data, count: count)
    }

    public func fill(_ value: Float) { data.update(repeating: value, count: count) }
}

/// Description of one model input or output as the ONNX file declares it (-1 = dynamic).
public struct TensorSpec: Equatable, Sendable {
    public let name: String
    public let shape: [Int]
}

/// One ONNX model loaded into a session.
public final class Session {
    public let name: String
    public let path: String
    public let inputs: [TensorSpec]
    public let outputs: [TensorSpec]
    /// The provider the session was created for (`auto` resolved).
    public let provider: ExecutionProvider
    let runtime: OnnxRuntime
    let handle: OpaquePointer

    public init(runtime: OnnxRuntime, name: String, path: String, config: SessionConfig) throws {
        self.runtime = runtime
        self.name = name
        self.path = path
        let api = runtime.api.pointee
        var options: OpaquePointer?
        try runtime.check(api.CreateSessionOptions(&options))
        defer { api.ReleaseSessionOptions(options) }
        try runtime.check(api.SetSessionGraphOptimizationLevel(options, ORT_ENABLE_ALL))
        try runtime.check(api.SetIntraOpNumThreads(options, Int32(config.threads)))
        try runtime.check(api.SetInterOpNumThreads(options, 1))
        try runtime.check(api.AddSessionConfigEntry(options, "session.intra_op.allow_spinning", "0"))
        try runtime.check(api.AddSessionConfigEntry(options, "session.inter_op.allow_spinning", "0"))
        var provider = config.provider
        if provider == .auto {
            let available = runtime.availableProviders()
            provider = [ExecutionProvider.tensorrt, .cuda, .openvino].first { available.contains($0.ortName) } ?? .cpu
        }
        self.provider = provider
        if provider != .cpu {
            let available = runtime.availableProviders()
            guard available.contains(provider.ortName) else {
                throw EngineError.badSettings(
                    detail: "execution-provider=\(provider.rawValue) is not in the ONNX Runtime at "
                        + "\(runtime.libraryPath) (it has \(available.joined(separator: ", "))); install a build "
                        + "with it (scripts/setup.sh --gpu) or use execution-provider=cpu")
            }
            switch provider {
            case .cuda:
                var cuda: OpaquePointer?
                try runtime.check(api.CreateCUDAProviderOptions(&cuda))
                defer { api.ReleaseCUDAProviderOptions(cuda) }
                try runtime.check(api.SessionOptionsAppendExecutionProvider_CUDA_V2(options, cuda))
            case .tensorrt:
                var tensorrt: OpaquePointer?
                try runtime.check(api.CreateTensorRTProviderOptions(&tensorrt))
                defer { api.ReleaseTensorRTProviderOptions(tensorrt) }
                try runtime.check(api.SessionOptionsAppendExecutionProvider_TensorRT_V2(options, tensorrt))
                // Nodes TensorRT cannot take fall back to CUDA, then CPU.
                var cuda: OpaquePointer?
                try runtime.check(api.CreateCUDAProviderOptions(&cuda))
                defer { api.ReleaseCUDAProviderOptions(cuda) }
                try runtime.check(api.SessionOptionsAppendExecutionProvider_CUDA_V2(options, cuda))
            case .openvino:
                try runtime.check(api.SessionOptionsAppendExecutionProvider(options, "OpenVINO", nil, nil, 0))
            case .cpu, .auto:
                break
            }
        }
        var session: OpaquePointer?
        do {
            try runtime.check(api.CreateSession(runtime.env, path, options, &session))
        } catch let EngineError.runtimeUnavailable(detail) {
            throw EngineError.modelInvalid(path: path, detail: "ONNX Runtime cannot load it (\(detail)). " + setupHint)
        }
        handle = session!
        inputs = try Session.specs(runtime: runtime, session: handle, input: true)
        outputs = try Session.specs(runtime: runtime, session: handle, input: false)
    }

    deinit { runtime.api.pointee.ReleaseSession(handle) }

    private static func specs(runtime: OnnxRuntime, session: OpaquePointer, input: Bool) throws -> [TensorSpec] {
        let api = runtime.api.pointee
        var allocator: UnsafeMutablePointer<OrtAllocator>?
        try runtime.check(api.GetAllocatorWithDefaultOptions(&allocator))
        var count = 0
        try runtime.check(input ? api.SessionGetInputCount(session, &count) : api.SessionGetOutputCount(session, &count))
        var result: [TensorSpec] = []
        for index in 0..<count {
            var rawName: UnsafeMutablePointer<CChar>?
            try runtime.check(input
                ? api.SessionGetInputName(session, index, allocator, &rawName)
                : api.SessionGetOutputName(session, index, allocator, &rawName))
            let name = String(cString: rawName!)
            _ = api.AllocatorFree(allocator, rawName)
            var typeInfo: OpaquePointer?
            try runtime.check(input
                ? api.SessionGetInputTypeInfo(session, index, &typeInfo)
                : api.SessionGetOutputTypeInfo(session, index, &typeInfo))
            defer { api.ReleaseTypeInfo(typeInfo) }
            var tensorInfo: OpaquePointer?
            try runtime.check(api.CastTypeInfoToTensorInfo(typeInfo, &tensorInfo))
            var rank = 0
            try runtime.check(api.GetDimensionsCount(tensorInfo, &rank))
            var dims = [Int64](repeating: 0, count: rank)
            try runtime.check(api.GetDimensions(tensorInfo, &dims, rank))
            result.append(TensorSpec(name: name, shape: dims.map { Int($0) }))
        }
        return result
    }

    /// Prepares a reusable call: names and value pointers are laid out once, so `Binding.run()`
    /// does no allocation per frame.
    public func bind(inputs: [String: Tensor], outputs: [String: Tensor]) throws -> Binding {
        for spec in self.inputs where inputs[spec.name] == nil {
            throw EngineError.modelInvalid(path: path, detail: "input '\(spec.name)' of model '\(name)' is not bound")
        }
        for (key, tensor) in inputs {
            guard let spec = self.inputs.first(where: { $0.name == key }) else {
                throw EngineError.modelInvalid(path: path, detail: "model '\(name)' has no input '\(key)'")
            }
            try Session.checkShape(spec, tensor, model: name, path: path)
        }
        for (key, tensor) in outputs {
            guard let spec = self.outputs.first(where: { $0.name == key }) else {
                throw EngineError.modelInvalid(path: path, detail: "model '\(name)' has no output '\(key)'")
            }
            try Session.checkShape(spec, tensor, model: name, path: path)
        }
        let orderedInputs = self.inputs.map { ($0.name, inputs[$0.name]!) }
        let orderedOutputs = self.outputs.compactMap { spec in outputs[spec.name].map { (spec.name, $0) } }
        return Binding(session: self, inputs: orderedInputs, outputs: orderedOutputs)
    }

    private static func checkShape(_ spec: TensorSpec, _ tensor: Tensor, model: String, path: String) throws {
        let matches = spec.shape.count == tensor.shape.count
            && zip(spec.shape, tensor.shape).allSatisfy { $0 < 0 || $0 == $1 }
        guard matches else {
            throw EngineError.modelInvalid(
                path: path,
                detail: "model '\(model)' \(spec.name) has shape \(spec.shape), the engine needs \(tensor.shape)")
        }
    }
}

/// A session call with fixed input and output tensors.
public final class Binding {
    let session: Session
    public let inputs: [Tensor]
    public let outputs: [Tensor]
    private let inputNames: UnsafeMutablePointer<UnsafePointer<CChar>?>
    private let outputNames: UnsafeMutablePointer<UnsafePointer<CChar>?>
    private let inputValues: UnsafeMutablePointer<OpaquePointer?>
    private let outputValues: UnsafeMutablePointer<OpaquePointer?>

    init(session: Session, inputs: [(String, Tensor)], outputs: [(String, Tensor)]) {
        self.session = session
        self.inputs = inputs.map(\.1)
        self.outputs = outputs.map(\.1)
        inputNames = .allocate(capacity: max(inputs.count, 1))
        outputNames = .allocate(capacity: max(outputs.count, 1))
        inputValues = .allocate(capacity: max(inputs.count, 1))
        outputValues = .allocate(capacity: max(outputs.count, 1))
        for (index, (name, tensor)) in inputs.enumerated() {
            inputNames[index] = UnsafePointer(strdup(name))
            inputValues[index] = tensor.value
        }
        for (index, (name, tensor)) in outputs.enumerated() {
            outputNames[index] = UnsafePointer(strdup(name))
            outputValues[index] = tensor.value
        }
    }

    deinit {
        for index in 0..<inputs.count { free(UnsafeMutablePointer(mutating: inputNames[index])) }
        for index in 0..<outputs.count { free(UnsafeMutablePointer(mutating: outputNames[index])) }
        inputNames.deallocate()
        outputNames.deallocate()
        inputValues.deallocate()
        outputValues.deallocate()
    }

    /// Runs the model; outputs land in the bound tensors' storage.
    public func run() throws {
        let runtime = session.runtime
        let status = runtime.api.pointee.Run(
            session.handle, nil, inputNames, inputValues, inputs.count, outputNames, outputs.count, outputValues)
        do {
            try runtime.check(status)
        } catch let EngineError.runtimeUnavailable(detail) {
            throw EngineError.inference(detail: "model '\(session.name)': \(detail)")
        }
    }
}
