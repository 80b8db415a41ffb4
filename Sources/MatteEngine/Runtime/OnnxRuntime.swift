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

    /// Where set-up installs the OpenVINO build (the `onnxruntime-openvino` wheel's library with
    /// OpenVINO beside it), which runs `precision=bf16`.
    public static var openvinoLibraryPath: String {
        ModelLocations.dataRoot + "/onnxruntime-openvino/libonnxruntime.so.1"
    }

    /// Loads (once per process and path) the runtime. `explicitPath` empty means: the
    /// `MATANYONE_ONNXRUNTIME` variable, else the set-up location, else the system search path; for
    /// `provider` openvino, the OpenVINO build set-up installs comes first (the others lack it).
    public static func shared(explicitPath: String = "", for provider: ExecutionProvider = .cpu) throws -> OnnxRuntime {
        var candidates: [String] = []
        if !explicitPath.isEmpty {
            candidates = [explicitPath]
        } else if let fromEnv = ProcessInfo.processInfo.environment["MATANYONE_ONNXRUNTIME"], !fromEnv.isEmpty {
            candidates = [fromEnv]
        } else if provider == .openvino, FileManager.default.fileExists(atPath: openvinoLibraryPath) {
            candidates = [openvinoLibraryPath]
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

    /// The provider `requested` resolves to. A GPU provider is checked (and its NVIDIA libraries loaded)
    /// first: explicit, a problem is an error naming the fix; `auto` takes TensorRT, CUDA or OpenVINO,
    /// whichever is ready first, else the CPU with the reason in `fallbackReason`. `device`: the GPU's
    /// index (CUDA's numbering), which must be one the driver sees.
    public func choose(_ requested: ExecutionProvider, device: Int = 0) throws -> ProviderChoice {
        let available = availableProviders()
        switch requested {
        case .cpu:
            return ProviderChoice(requested: .cpu, provider: .cpu)
        case .cuda, .tensorrt, .openvino:
            guard available.contains(requested.ortName) else {
                throw EngineError.badSettings(
                    detail: "execution-provider=\(requested.rawValue) is not in the ONNX Runtime at "
                        + "\(libraryPath) (it has \(available.joined(separator: ", "))); "
                        + (requested == .openvino
                            ? "leave runtime-library empty to use the OpenVINO build scripts/setup.sh installs (\(OnnxRuntime.openvinoLibraryPath))"
                            : "install a build with it (scripts/setup.sh --gpu)")
                        + " or use execution-provider=cpu")
            }
            if requested != .openvino {
                let devices = try GpuReadiness.prepare(provider: requested, runtimeLibrary: libraryPath)
                if let problem = GpuReadiness.deviceProblem(device, of: devices) { throw EngineError.badSettings(detail: problem) }
            }
            return ProviderChoice(requested: requested, provider: requested)
        case .auto:
            // TensorRT only when its (optional) libraries are there; why CUDA cannot run is the reason given.
            var reason = "the ONNX Runtime at \(libraryPath) has no GPU execution provider (install the GPU build with scripts/setup.sh --gpu)"
            for candidate in [ExecutionProvider.tensorrt, .cuda] where available.contains(candidate.ortName) {
                do {
                    let devices = try GpuReadiness.prepare(provider: candidate, runtimeLibrary: libraryPath)
                    if let problem = GpuReadiness.deviceProblem(device, of: devices) {
                        throw EngineError.gpuUnavailable(provider: candidate.rawValue, problems: [problem])
                    }
                    return ProviderChoice(requested: .auto, provider: candidate)
                } catch {
                    EngineLog.write(.info, "execution-provider=auto: \(error)")
                    reason = "\(error)"
                }
            }
            if available.contains(ExecutionProvider.openvino.ortName) { return ProviderChoice(requested: .auto, provider: .openvino) }
            return ProviderChoice(requested: .auto, provider: .cpu, fallbackReason: "execution-provider=auto runs on the CPU: " + reason)
        }
    }

    /// Runs `open` (which creates an engine's sessions) on the chosen provider; under `auto`, a GPU
    /// that fails while its sessions are created is given up for the CPU, with the reason in `choice`.
    public func open<T>(_ choice: inout ProviderChoice, _ open: (ExecutionProvider) throws -> T) throws -> T {
        do {
            return try open(choice.provider)
        } catch let EngineError.gpuUnavailable(provider, problems) where choice.requested == .auto {
            choice = ProviderChoice(requested: .auto, provider: .cpu,
                                    fallbackReason: "execution-provider=auto runs on the CPU: \(provider) failed: "
                                        + problems.joined(separator: "; "))
            return try open(.cpu)
        }
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

    /// An NVIDIA GPU's (CUDA and TensorRT share its memory).
    var isGpu: Bool { self == .cuda || self == .tensorrt }

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

/// What a requested provider resolved to (see `OnnxRuntime.choose`).
public struct ProviderChoice: Equatable, Sendable {
    public let requested: ExecutionProvider
    public let provider: ExecutionProvider
    /// Why `auto` runs on the CPU; nil otherwise.
    public var fallbackReason: String?

    public init(requested: ExecutionProvider, provider: ExecutionProvider, fallbackReason: String? = nil) {
        self.requested = requested
        self.provider = provider
        self.fallbackReason = fallbackReason
    }
}

/// C string arrays for the runtime's key/value option calls.
func withCStrings<T>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) throws -> T) rethrows -> T {
    let copies = strings.map { UnsafePointer(strdup($0)) }
    defer { copies.forEach { free(UnsafeMutablePointer(mutating: $0)) } }
    return try copies.withUnsafeBufferPointer { try body($0.baseAddress!) }
}

/// How a session should run: per-session thread pool with spinning off (several sessions run one after
/// another on few cores; spinning threads of idle sessions would steal the cores of the busy one).
public struct SessionConfig: Equatable, Sendable {
    public var threads: Int = 0
    public var provider: ExecutionProvider = .cpu
    /// CUDA/TensorRT: which GPU (CUDA's numbering, as nvidia-smi lists them unless CUDA_VISIBLE_DEVICES
    /// renumbers them).
    public var device = 0
    /// The model set's folder (TensorRT caches its engines in `tensorrt-cache/` there); set by
    /// `ModelManifest.openSession`.
    public var cacheDirectory: String?
    /// The set is fp16: TensorRT may build fp16 engines.
    public var fp16 = false
    /// OpenVINO on the CPU with bfloat16 arithmetic (a bf16 set's `bf16.models`).
    public var bf16 = false
    public init(threads: Int = 0, provider: ExecutionProvider = .cpu) {
        self.threads = threads
        self.provider = provider
    }
}

/// A float32 tensor whose storage we own; wraps it as an OrtValue once, so runs reuse both. Or, made
/// `onDeviceOf` a session, in memory that session's provider allocates (a GPU's for CUDA), which only
/// models and built-in graphs read and write: `data` is then not for Swift to touch, and asking for
/// it stops the program (on the CPU provider such memory is host memory, so the tests that run the
/// device path there would not otherwise notice glue that could not run on a GPU).
public final class Tensor {
    public let shape: [Int]
    public let count: Int
    /// The storage, for Swift to read and write: host tensors only.
    public var data: UnsafeMutablePointer<Float> {
        precondition(!isOnDevice, "Swift touched '\(name)', a tensor in the provider's memory")
        return storageAddress
    }
    private let storageAddress: UnsafeMutablePointer<Float>
    let name: String
    let value: OpaquePointer
    /// Where the storage came from: ours (calloc), or the runtime's allocator for a device.
    private enum Storage {
        case host
        case device(allocator: UnsafeMutablePointer<OrtAllocator>, memoryInfo: OpaquePointer)
    }
    private let storage: Storage
    /// The session whose allocator made the storage: it must outlive the allocator.
    private let allocatorOwner: Session?
    public var isOnDevice: Bool { if case .device = storage { return true } else { return false } }

    /// Shapes come from manifests and sizes from caps: the element count is checked (no negative
    /// dimension, no overflow) and an allocation the machine refuses is an error, not an abort.
    public init(runtime: OnnxRuntime, shape: [Int], name: String = "tensor") throws {
        let count = try Tensor.checkedCount(shape, name: name)
        guard let storage = calloc(max(count, 1), MemoryLayout<Float>.size) else {
            throw EngineError.badSettings(detail: "cannot allocate \(MemoryBudget.describe(count * 4)) for '\(name)' \(shape)")
        }
        self.shape = shape
        self.count = count
        self.name = name
        storageAddress = storage.bindMemory(to: Float.self, capacity: max(count, 1))
        var dims = shape.map { Int64($0) }
        var created: OpaquePointer?
        let status = runtime.api.pointee.CreateTensorWithDataAsOrtValue(
            runtime.cpuMemory, storageAddress, count * MemoryLayout<Float>.size, &dims, dims.count,
            ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &created)
        do {
            try runtime.check(status, "CreateTensorWithDataAsOrtValue")
        } catch {
            free(storage)
            throw error
        }
        value = created!
        api = runtime.api
        self.storage = .host
        allocatorOwner = nil
    }

    /// A tensor in the memory `session`'s provider uses (the GPU's for CUDA/TensorRT, host memory
    /// for the CPU provider), allocated by the runtime.
    public init(onDeviceOf session: Session, shape: [Int], name: String = "tensor") throws {
        let runtime = session.runtime
        let api = runtime.api.pointee
        let count = try Tensor.checkedCount(shape, name: name)
        var memoryInfo: OpaquePointer?
        let gpu = session.provider.isGpu
        try session.check(api.CreateMemoryInfo(gpu ? "Cuda" : "Cpu", OrtArenaAllocator, gpu ? Int32(session.device) : 0,
                                               OrtMemTypeDefault, &memoryInfo), "CreateMemoryInfo")
        var allocator: UnsafeMutablePointer<OrtAllocator>?
        do {
            try session.check(api.CreateAllocator(session.handle, memoryInfo, &allocator), "CreateAllocator")
        } catch {
            api.ReleaseMemoryInfo(memoryInfo)
            throw error
        }
        var dims = shape.map { Int64($0) }
        var created: OpaquePointer?
        var raw: UnsafeMutableRawPointer?
        do {
            try session.check(api.CreateTensorAsOrtValue(allocator, &dims, dims.count, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &created),
                              "CreateTensorAsOrtValue (\(MemoryBudget.describe(count * 4)) for '\(name)' on \(session.provider.rawValue))")
            try session.check(api.GetTensorMutableData(created, &raw), "GetTensorMutableData")
        } catch {
            if let created { api.ReleaseValue(created) }
            api.ReleaseAllocator(allocator)
            api.ReleaseMemoryInfo(memoryInfo)
            throw error
        }
        self.shape = shape
        self.count = count
        self.name = name
        storageAddress = raw!.bindMemory(to: Float.self, capacity: max(count, 1))
        value = created!
        self.api = runtime.api
        storage = .device(allocator: allocator!, memoryInfo: memoryInfo!)
        allocatorOwner = session
    }

    private static func checkedCount(_ shape: [Int], name: String) throws -> Int {
        guard let count = checkedProduct(shape), checkedProduct([max(count, 1), MemoryLayout<Float>.size]) != nil else {
            throw EngineError.modelInvalid(path: name, detail: "shape \(shape) has a negative dimension or more elements than fit in memory")
        }
        return count
    }

    private let api: UnsafePointer<OrtApi>

    deinit {
        api.pointee.ReleaseValue(value)   // frees device storage through its allocator
        switch storage {
        case .host:
            free(storageAddress)
        case let .device(allocator, memoryInfo):
            api.pointee.ReleaseAllocator(allocator)
            api.pointee.ReleaseMemoryInfo(memoryInfo)
        }
    }

    public var buffer: UnsafeMutableBufferPointer<Float> { UnsafeMutableBufferPointer(start: data, count: count) }

    /// An OrtValue over part of this tensor's storage (`offset` elements in), with another shape;
    /// for moving data with graphs (a GPU's memory included). The view must not outlive the tensor.
    func view(offset: Int = 0, shape: [Int]) throws -> OrtValueView {
        let elements = shape.reduce(1, *)
        precondition(offset >= 0 && elements >= 0 && offset + elements <= count, "view \(offset)+\(shape) of '\(name)' \(self.shape)")
        var memoryInfo: OpaquePointer?
        try OnnxRuntime.check(api, api.pointee.GetTensorMemoryInfo(value, &memoryInfo), "GetTensorMemoryInfo")
        return try OrtValueView(api: api, memoryInfo: memoryInfo!, data: UnsafeMutableRawPointer(storageAddress + offset),
                                bytes: elements * MemoryLayout<Float>.size, shape: shape, type: ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
    }

    public func copy(from other: Tensor) {
        precondition(other.count == count)
        data.update(from: other.data, count: count)
    }

    public func fill(_ value: Float) { data.update(repeating: value, count: count) }
}

/// An OrtValue over memory owned by someone else (a tensor's or a memory bank's storage), with the
/// shape a call needs; the storage must outlive the view.
final class OrtValueView {
    let value: OpaquePointer
    private let api: UnsafePointer<OrtApi>

    convenience init(runtime: OnnxRuntime, floats: UnsafeMutablePointer<Float>, shape: [Int]) throws {
        try self.init(runtime: runtime, data: UnsafeMutableRawPointer(floats), bytes: shape.reduce(1, *) * 4, shape: shape,
                      type: ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
    }

    convenience init(runtime: OnnxRuntime, int64s: UnsafeMutablePointer<Int64>, shape: [Int]) throws {
        try self.init(runtime: runtime, data: UnsafeMutableRawPointer(int64s), bytes: shape.reduce(1, *) * 8, shape: shape,
                      type: ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64)
    }

    private convenience init(runtime: OnnxRuntime, data: UnsafeMutableRawPointer, bytes: Int, shape: [Int],
                             type: ONNXTensorElementDataType) throws {
        try self.init(api: runtime.api, memoryInfo: runtime.cpuMemory, data: data, bytes: bytes, shape: shape, type: type)
    }

    /// Over memory `memoryInfo` describes (host or a device's).
    init(api: UnsafePointer<OrtApi>, memoryInfo: OpaquePointer, data: UnsafeMutableRawPointer, bytes: Int, shape: [Int],
         type: ONNXTensorElementDataType) throws {
        var dims = shape.map { Int64($0) }
        var created: OpaquePointer?
        try OnnxRuntime.check(api, api.pointee.CreateTensorWithDataAsOrtValue(memoryInfo, data, bytes, &dims, dims.count, type, &created),
                              "CreateTensorWithDataAsOrtValue")
        value = created!
        self.api = api
    }

    deinit { api.pointee.ReleaseValue(value) }
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
    /// The GPU it runs on (CUDA/TensorRT).
    public let device: Int
    /// OpenVINO runs it with bf16 arithmetic.
    public let bf16: Bool
    let runtime: OnnxRuntime
    let handle: OpaquePointer

    /// `model` is the ONNX file's content (read and checked by the caller); `path` names it in messages.
    public init(runtime: OnnxRuntime, name: String, path: String, model: [UInt8], config: SessionConfig) throws {
        self.runtime = runtime
        self.name = name
        self.path = path
        let api = runtime.api.pointee
        func check(_ status: OpaquePointer?, _ call: String) throws {
            try Session.check(runtime, model: name, file: path, status, call)
        }
        var options: OpaquePointer?
        try check(api.CreateSessionOptions(&options), "CreateSessionOptions")
        defer { api.ReleaseSessionOptions(options) }
        try check(api.SetSessionGraphOptimizationLevel(options, ORT_ENABLE_ALL), "SetSessionGraphOptimizationLevel")
        try check(api.SetIntraOpNumThreads(options, Int32(config.threads)), "SetIntraOpNumThreads")
        try check(api.SetInterOpNumThreads(options, 1), "SetInterOpNumThreads")
        try check(api.AddSessionConfigEntry(options, "session.intra_op.allow_spinning", "0"), "AddSessionConfigEntry")
        try check(api.AddSessionConfigEntry(options, "session.inter_op.allow_spinning", "0"), "AddSessionConfigEntry")
        let provider = try runtime.choose(config.provider, device: config.device).provider
        device = config.device
        self.provider = provider
        bf16 = config.bf16 && provider == .openvino
        EngineLog.write(.info, "opening model '\(name)' (\(path), \(model.count) bytes) on \(provider.rawValue)")
        switch provider {
        case .cuda:
            try Session.appendCUDA(api, options, device: config.device, check)
        case .tensorrt:
            var tensorrt: OpaquePointer?
            try check(api.CreateTensorRTProviderOptions(&tensorrt), "CreateTensorRTProviderOptions")
            defer { api.ReleaseTensorRTProviderOptions(tensorrt) }
            // Engines are built on the first run of each input shape (minutes) and cached beside the
            // model set; ONNX Runtime names each cache file by the model's hash and the shapes' profile.
            var settings = ["trt_fp16_enable": config.fp16 ? "1" : "0", "device_id": "\(config.device)"]
            if let cache = config.cacheDirectory {
                let folder = cache + "/tensorrt-cache"
                try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
                settings.merge(["trt_engine_cache_enable": "1", "trt_engine_cache_path": folder,
                                "trt_timing_cache_enable": "1", "trt_timing_cache_path": folder]) { $1 }
            }
            try withCStrings(settings.keys.sorted()) { keys in
                try withCStrings(settings.keys.sorted().map { settings[$0]! }) { values in
                    try check(api.UpdateTensorRTProviderOptions(tensorrt, keys, values, settings.count), "UpdateTensorRTProviderOptions")
                }
            }
            try check(api.SessionOptionsAppendExecutionProvider_TensorRT_V2(options, tensorrt), "SessionOptionsAppendExecutionProvider_TensorRT_V2")
            // Nodes TensorRT cannot take fall back to CUDA, then CPU.
            try Session.appendCUDA(api, options, device: config.device, check)
        case .openvino:
            // On the CPU: in bf16 where a bf16 set says so (OpenVINO's inference precision hint; its norms,
            // softmax and reductions stay fp32 under it), else in fp32, said explicitly because
            // OpenVINO's own default on CPUs with AMX is bf16.
            var settings = [("device_type", "CPU"),
                            ("load_config", #"{"CPU":{"INFERENCE_PRECISION_HINT":"\#(config.bf16 ? "bf16" : "f32")"}}"#)]
            if config.threads > 0 { settings.append(("num_of_threads", "\(config.threads)")) }
            try withCStrings(settings.map(\.0)) { keys in
                try withCStrings(settings.map(\.1)) { values in
                    try check(api.SessionOptionsAppendExecutionProvider(options, "OpenVINO", keys, values, settings.count),
                              "SessionOptionsAppendExecutionProvider")
                }
            }
        case .cpu, .auto:
            break
        }
        var session: OpaquePointer?
        do {
            try model.withUnsafeBytes { bytes in
                try check(api.CreateSessionFromArray(runtime.env, bytes.baseAddress, bytes.count, options, &session),
                          "CreateSession")
            }
        } catch let error as RuntimeCallError where provider != .cpu {
            // The model loads on the CPU (its bytes were checked); on a GPU this is the provider failing.
            throw EngineError.gpuUnavailable(provider: provider.rawValue, problems: [
                "ONNX Runtime cannot create model '\(name)' on it (\(error.message)); execution-provider=cpu runs it on the CPU"])
        }
        handle = session!
        inputs = try Session.specs(runtime: runtime, session: handle, input: true, check)
        outputs = try Session.specs(runtime: runtime, session: handle, input: false, check)
    }

    deinit { runtime.api.pointee.ReleaseSession(handle) }

    /// `OnnxRuntime.check` for a call about this model: its failure names the model and its file (what
    /// it means for the user is decided by the engine that made the call).
    static func check(_ runtime: OnnxRuntime, model: String, file: String, _ status: OpaquePointer?, _ call: String) throws {
        do {
            try runtime.check(status, call)
        } catch var error as RuntimeCallError {
            error.model = model
            error.file = file
            throw error
        }
    }

    func check(_ status: OpaquePointer?, _ call: String) throws { try Session.check(runtime, model: name, file: path, status, call) }

    private static func appendCUDA(_ api: OrtApi, _ options: OpaquePointer?, device: Int,
                                   _ check: (OpaquePointer?, String) throws -> Void) throws {
        var cuda: OpaquePointer?
        try check(api.CreateCUDAProviderOptions(&cuda), "CreateCUDAProviderOptions")
        defer { api.ReleaseCUDAProviderOptions(cuda) }
        try withCStrings(["device_id"]) { keys in
            try withCStrings(["\(device)"]) { values in
                try check(api.UpdateCUDAProviderOptions(cuda, keys, values, 1), "UpdateCUDAProviderOptions")
            }
        }
        try check(api.SessionOptionsAppendExecutionProvider_CUDA_V2(options, cuda), "SessionOptionsAppendExecutionProvider_CUDA_V2")
    }

    private static func specs(runtime: OnnxRuntime, session: OpaquePointer, input: Bool,
                              _ check: (OpaquePointer?, String) throws -> Void) throws -> [TensorSpec] {
        let api = runtime.api.pointee
        var allocator: UnsafeMutablePointer<OrtAllocator>?
        try check(api.GetAllocatorWithDefaultOptions(&allocator), "GetAllocatorWithDefaultOptions")
        var count = 0
        try check(input ? api.SessionGetInputCount(session, &count) : api.SessionGetOutputCount(session, &count),
                          input ? "SessionGetInputCount" : "SessionGetOutputCount")
        var result: [TensorSpec] = []
        for index in 0..<count {
            var rawName: UnsafeMutablePointer<CChar>?
            try check(input
                ? api.SessionGetInputName(session, index, allocator, &rawName)
                : api.SessionGetOutputName(session, index, allocator, &rawName), "SessionGetInputName/OutputName")
            let name = String(cString: rawName!)
            _ = api.AllocatorFree(allocator, rawName)
            var typeInfo: OpaquePointer?
            try check(input
                ? api.SessionGetInputTypeInfo(session, index, &typeInfo)
                : api.SessionGetOutputTypeInfo(session, index, &typeInfo), "SessionGetInputTypeInfo/OutputTypeInfo")
            defer { api.ReleaseTypeInfo(typeInfo) }
            var tensorInfo: OpaquePointer?
            try check(api.CastTypeInfoToTensorInfo(typeInfo, &tensorInfo), "CastTypeInfoToTensorInfo")
            var rank = 0
            try check(api.GetDimensionsCount(tensorInfo, &rank), "GetDimensionsCount")
            var dims = [Int64](repeating: 0, count: rank)
            try check(api.GetDimensions(tensorInfo, &dims, rank), "GetDimensions")
            result.append(TensorSpec(name: name, shape: dims.map { Int($0) }))
        }
        return result
    }

    /// One call with values made for it (shapes that change from call to call); outputs land in
    /// the given values' storage.
    func run<Inputs: Sequence>(inputs: Inputs, outputs: [(String, OpaquePointer)]) throws where Inputs.Element == (String, OpaquePointer) {
        let inputs = Array(inputs)
        try withCStrings(inputs.map(\.0)) { inputNames in
            try withCStrings(outputs.map(\.0)) { outputNames in
                var inputValues: [OpaquePointer?] = inputs.map(\.1)
                var outputValues: [OpaquePointer?] = outputs.map(\.1)
                try check(runtime.api.pointee.Run(handle, nil, inputNames, &inputValues, inputs.count,
                                                  outputNames, outputs.count, &outputValues), "Run")
            }
        }
    }

    /// One call whose outputs the runtime allocates, for a model whose output shapes follow from its
    /// inputs' values (RVM's recurrent states depend on `downsample_ratio`): the outputs' shapes, in
    /// `outputs`' order (their values are dropped).
    func shapesOfRun(inputs: [String: Tensor], outputs names: [String]) throws -> [[Int]] {
        let api = runtime.api.pointee
        let orderedInputs = self.inputs.compactMap { spec in inputs[spec.name].map { (spec.name, $0.value) } }
        var produced = [OpaquePointer?](repeating: nil, count: names.count)
        defer { for value in produced where value != nil { api.ReleaseValue(value) } }
        try withCStrings(orderedInputs.map(\.0)) { inputNames in
            try withCStrings(names) { outputNames in
                var inputValues: [OpaquePointer?] = orderedInputs.map(\.1)
                try check(api.Run(handle, nil, inputNames, &inputValues, orderedInputs.count, outputNames, names.count,
                                  &produced), "Run")
            }
        }
        return try produced.map { value in
            var info: OpaquePointer?
            try check(api.GetTensorTypeAndShape(value, &info), "GetTensorTypeAndShape")
            defer { api.ReleaseTensorTypeAndShapeInfo(info) }
            var rank = 0
            try check(api.GetDimensionsCount(info, &rank), "GetDimensionsCount")
            var dims = [Int64](repeating: 0, count: rank)
            try check(api.GetDimensions(info, &dims, rank), "GetDimensions")
            return dims.map { Int($0) }
        }
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
        try session.check(session.runtime.api.pointee.Run(
            session.handle, nil, inputNames, inputValues, inputs.count, outputNames, outputs.count, outputValues), "Run")
    }
}
