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
            } catch let error as RuntimeCallError {
                failures.append("\(path): \(error)")
            } catch let EngineError.runtimeUnavailable(detail) {
                failures.append(detail)
            }
        }
        throw EngineError.runtimeUnavailable(
            detail: failures.joined(separator: "; ") + ". " + setupHint
                + " Or set the element's runtime-library property (or MATANYONE_ONNXRUNTIME) to a libonnxruntime.so.")
    }

    private init(path: String) throws {
        try OnnxRuntime.checkLibraryFile(path)
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
        // ONNX Runtime's own log goes where the engine's goes (the element's debug category).
        try OnnxRuntime.check(api, api.pointee.CreateEnvWithCustomLogger(EngineLog.runtimeCallback, nil, EngineLog.runtimeLevel,
                                                                         "matanyone", &env), "CreateEnvWithCustomLogger")
        guard let env else { throw EngineError.runtimeUnavailable(detail: "CreateEnv returned nothing") }
        _ = api.pointee.DisableTelemetryEvents(env)
        var memory: OpaquePointer?
        try OnnxRuntime.check(api, api.pointee.CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &memory), "CreateCpuMemoryInfo")
        self.api = api
        self.env = env
        self.cpuMemory = memory!
        self.libraryPath = path
        self.version = version
        EngineLog.write(.info, "loaded ONNX Runtime \(version) from \(path)")
    }

    /// A named library file (a path, not a bare name for the loader's search) must be a whole ELF
    /// shared object before `dlopen` sees it: dlopen blocks forever on a FIFO and dies of SIGBUS on a
    /// truncated file when it touches the missing pages.
    private static func checkLibraryFile(_ path: String) throws {
        guard path.contains("/") else { return }
        do {
            try SafeFile.checkSharedLibrary(path)
        } catch let problem as FileProblem {
            throw EngineError.runtimeUnavailable(detail: "cannot load \(path): it \(problem)")
        }
    }

    /// Providers compiled into the loaded library, e.g. ["CUDAExecutionProvider", "CPUExecutionProvider"].
    public func availableProviders() -> [String] {
        var list: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        var count: Int32 = 0
        guard (try? check(api.pointee.GetAvailableProviders(&list, &count), "GetAvailableProviders")) != nil, let list else { return [] }
        defer { _ = api.pointee.ReleaseAvailableProviders(list, count) }
        return (0..<Int(count)).compactMap { list[$0].map { String(cString: $0) } }
    }

    /// Turns a failed call's status into a `RuntimeCallError` naming the call; what kind of failure it
    /// is for the user (a bad model, a broken runtime, a failing frame) is decided by the engine that
    /// made the call (`EngineError.classify`).
    static func check(_ api: UnsafePointer<OrtApi>, _ status: OpaquePointer?, _ call: String) throws {
        guard let status else { return }
        let message = api.pointee.GetErrorMessage(status).map { String(cString: $0) } ?? "unknown error"
        api.pointee.ReleaseStatus(status)
        throw RuntimeCallError(call: call, message: message)
    }

    func check(_ status: OpaquePointer?, _ call: String) throws { try OnnxRuntime.check(api, status, call) }
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

    /// Shapes come from manifests and sizes from caps: the element count is checked (no negative
    /// dimension, no overflow) and an allocation the machine refuses is an error, not an abort.
    public init(runtime: OnnxRuntime, shape: [Int], name: String = "tensor") throws {
        guard let count = checkedProduct(shape), let bytes = checkedProduct([max(count, 1), MemoryLayout<Float>.size]) else {
            throw EngineError.modelInvalid(path: name, detail: "shape \(shape) has a negative dimension or more elements than fit in memory")
        }
        guard let storage = calloc(max(count, 1), MemoryLayout<Float>.size) else {
            throw EngineError.badSettings(detail: "cannot allocate \(MemoryBudget.describe(bytes)) for '\(name)' \(shape)")
        }
        self.shape = shape
        self.count = count
        data = storage.bindMemory(to: Float.self, capacity: max(count, 1))
        var dims = shape.map { Int64($0) }
        var created: OpaquePointer?
        let status = runtime.api.pointee.CreateTensorWithDataAsOrtValue(
            runtime.cpuMemory, data, count * MemoryLayout<Float>.size, &dims, dims.count,
            ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &created)
        do {
            try runtime.check(status, "CreateTensorWithDataAsOrtValue")
        } catch {
            free(storage)
            throw error
        }
        value = created!
        api = runtime.api
    }

    private let api: UnsafePointer<OrtApi>

    deinit {
        api.pointee.ReleaseValue(value)
        free(data)
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

    /// `model` is the ONNX file's content (read and checked by the caller); `path` names it in messages.
    public init(runtime: OnnxRuntime, name: String, path: String, model: [UInt8], config: SessionConfig) throws {
        self.runtime = runtime
        self.name = name
        self.path = path
        let api = runtime.api.pointee
        // Failures name this model; what they mean for the user is decided by the engine.
        func check(_ status: OpaquePointer?, _ call: String) throws {
            do {
                try runtime.check(status, call)
            } catch var error as RuntimeCallError {
                error.model = name
                error.file = path
                throw error
            }
        }
        var options: OpaquePointer?
        try check(api.CreateSessionOptions(&options), "CreateSessionOptions")
        defer { api.ReleaseSessionOptions(options) }
        try check(api.SetSessionGraphOptimizationLevel(options, ORT_ENABLE_ALL), "SetSessionGraphOptimizationLevel")
        try check(api.SetIntraOpNumThreads(options, Int32(config.threads)), "SetIntraOpNumThreads")
        try check(api.SetInterOpNumThreads(options, 1), "SetInterOpNumThreads")
        try check(api.AddSessionConfigEntry(options, "session.intra_op.allow_spinning", "0"), "AddSessionConfigEntry")
        try check(api.AddSessionConfigEntry(options, "session.inter_op.allow_spinning", "0"), "AddSessionConfigEntry")
        var provider = config.provider
        if provider == .auto {
            let available = runtime.availableProviders()
            provider = [ExecutionProvider.tensorrt, .cuda, .openvino].first { available.contains($0.ortName) } ?? .cpu
        }
        self.provider = provider
        EngineLog.write(.info, "opening model '\(name)' (\(path), \(model.count) bytes) on \(provider.rawValue)")
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
                try check(api.CreateCUDAProviderOptions(&cuda), "CreateCUDAProviderOptions")
                defer { api.ReleaseCUDAProviderOptions(cuda) }
                try check(api.SessionOptionsAppendExecutionProvider_CUDA_V2(options, cuda), "SessionOptionsAppendExecutionProvider_CUDA_V2")
            case .tensorrt:
                var tensorrt: OpaquePointer?
                try check(api.CreateTensorRTProviderOptions(&tensorrt), "CreateTensorRTProviderOptions")
                defer { api.ReleaseTensorRTProviderOptions(tensorrt) }
                try check(api.SessionOptionsAppendExecutionProvider_TensorRT_V2(options, tensorrt), "SessionOptionsAppendExecutionProvider_TensorRT_V2")
                // Nodes TensorRT cannot take fall back to CUDA, then CPU.
                var cuda: OpaquePointer?
                try check(api.CreateCUDAProviderOptions(&cuda), "CreateCUDAProviderOptions")
                defer { api.ReleaseCUDAProviderOptions(cuda) }
                try check(api.SessionOptionsAppendExecutionProvider_CUDA_V2(options, cuda), "SessionOptionsAppendExecutionProvider_CUDA_V2")
            case .openvino:
                try check(api.SessionOptionsAppendExecutionProvider(options, "OpenVINO", nil, nil, 0), "SessionOptionsAppendExecutionProvider")
            case .cpu, .auto:
                break
            }
        }
        var session: OpaquePointer?
        try model.withUnsafeBytes { bytes in
            try check(api.CreateSessionFromArray(runtime.env, bytes.baseAddress, bytes.count, options, &session),
                      "CreateSession")
        }
        handle = session!
        inputs = try Session.specs(runtime: runtime, session: handle, input: true)
        outputs = try Session.specs(runtime: runtime, session: handle, input: false)
    }

    deinit { runtime.api.pointee.ReleaseSession(handle) }

    private static func specs(runtime: OnnxRuntime, session: OpaquePointer, input: Bool) throws -> [TensorSpec] {
        let api = runtime.api.pointee
        var allocator: UnsafeMutablePointer<OrtAllocator>?
        try runtime.check(api.GetAllocatorWithDefaultOptions(&allocator), "GetAllocatorWithDefaultOptions")
        var count = 0
        try runtime.check(input ? api.SessionGetInputCount(session, &count) : api.SessionGetOutputCount(session, &count),
                          input ? "SessionGetInputCount" : "SessionGetOutputCount")
        var result: [TensorSpec] = []
        for index in 0..<count {
            var rawName: UnsafeMutablePointer<CChar>?
            try runtime.check(input
                ? api.SessionGetInputName(session, index, allocator, &rawName)
                : api.SessionGetOutputName(session, index, allocator, &rawName), "SessionGetInputName/OutputName")
            let name = String(cString: rawName!)
            _ = api.AllocatorFree(allocator, rawName)
            var typeInfo: OpaquePointer?
            try runtime.check(input
                ? api.SessionGetInputTypeInfo(session, index, &typeInfo)
                : api.SessionGetOutputTypeInfo(session, index, &typeInfo), "SessionGetInputTypeInfo/OutputTypeInfo")
            defer { api.ReleaseTypeInfo(typeInfo) }
            var tensorInfo: OpaquePointer?
            try runtime.check(api.CastTypeInfoToTensorInfo(typeInfo, &tensorInfo), "CastTypeInfoToTensorInfo")
            var rank = 0
            try runtime.check(api.GetDimensionsCount(tensorInfo, &rank), "GetDimensionsCount")
            var dims = [Int64](repeating: 0, count: rank)
            try runtime.check(api.GetDimensions(tensorInfo, &dims, rank), "GetDimensions")
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
            try runtime.check(status, "Run")
        } catch var error as RuntimeCallError {
            error.model = session.name
            error.file = session.path
            throw error
        }
    }
}
