import Foundation

/// MatAnyone2's model set in this process: the sessions of its six networks, and on a GPU the
/// glue's graphs. Everything here is fixed when the element starts; the tracks of a working size
/// (`LocalTracks`) are built on it.
struct LocalModels {
    let directory: String
    let manifest: ModelManifest
    let sessions: [String: Session]
    /// The glue's graphs when data stays on the models' device (shared by every core); nil: host.
    let deviceGraphs: DeviceGraphs?
    let memoryBudget: Int
    /// Why execution-provider=auto runs on the CPU, or why bf16 may be slow here.
    let providerNote: String?

    init(options: EngineOptions, parameters: MatAnyone2Parameters) throws {
        // bf16's prerequisites (the CPU, the provider, the OpenVINO build) are settings to change, said first.
        let bf16Runtime = options.precision == .bf16 ? try LocalModels.openBf16Runtime(options) : nil
        directory = ModelLocations.matAnyone2Dir(modelDir: options.modelDir, precision: options.precision)
        if let maker = options.precision.maker,
           !ModelLocations.hasMatAnyone2Set(modelDir: options.modelDir, precision: options.precision) {
            let fp32 = ModelLocations.matAnyone2Dir(modelDir: options.modelDir, precision: .fp32)
            let name = options.precision.rawValue
            throw EngineError.modelMissing(
                path: directory, hint: "precision=\(name) needs the \(name) set made from the fp32 one: "
                    + "\(options.precision.makerPython) -m \(maker) --src \(fp32) --out \(directory) "
                    + "(from the gst-matanyone checkout), or precision=fp32.")
        }
        manifest = try ModelManifest.load(directory: directory)
        guard manifest.precision == options.precision else {
            throw EngineError.modelInvalid(path: directory + "/manifest.json",
                                           detail: "this is the \(manifest.precision.rawValue) set but precision=\(options.precision.rawValue) "
                                               + "was asked for: set precision=\(manifest.precision.rawValue), or point model-dir at the "
                                               + "folder holding matanyone2/ and "
                                               + (options.precision == .fp32 ? "the other sets" : "matanyone2-\(options.precision.rawValue)/"))
        }
        try manifest.validate(directory: directory, engine: EngineKind.matanyone2.rawValue, required: MatAnyone2Core.modelNames)
        guard manifest.dynamicSize != false else {
            throw EngineError.modelInvalid(path: directory + "/manifest.json",
                                           detail: "this engine needs a model set exported with dynamic sizes")
        }
        let runtime = try bf16Runtime ?? OnnxRuntime.shared(explicitPath: options.runtimeLibrary, for: options.session.provider)
        var choice = try runtime.choose(options.precision == .bf16 ? .cpu : options.session.provider, device: options.session.device)
        let (manifest, directory) = (manifest, directory)  // the closure must not capture a half-built self
        let sessions = try runtime.open(&choice) { provider in
            var config = options.session
            config.provider = provider
            var sessions: [String: Session] = [:]
            for name in MatAnyone2Core.modelNames {
                sessions[name] = try manifest.openSession(name, directory: directory, runtime: runtime, config: config)
            }
            return sessions
        }
        self.sessions = sessions
        providerNote = choice.fallbackReason ?? (options.precision == .bf16 && options.cpuFeatures.bf16SlowerThanFp32
            ? "precision=bf16 on this CPU (\(options.cpuFeatures.modelName)): Intel's AVX512_BF16 without AMX ran MatAnyone2 "
                + "1.17-1.29x slower than fp32 a frame where measured (scripts/bench.sh --precision bf16 measures it here); "
                + "precision=fp32 is likely faster" : nil)
        memoryBudget = options.memoryBudget
        // The whole step schedule built once at the smallest size: a manifest whose shapes the glue
        // cannot use fails here, when the element starts, not at negotiation.
        let smallest = try MatAnyone2Core(manifest: manifest, manifestPath: directory + "/manifest.json", sessions: sessions,
                                          width: 32, height: 32, parameters: parameters)
        // On a GPU the glue's arithmetic and the memory read run there too (see DeviceGraphs), so
        // that only the frame goes up and the alpha comes down.
        let provider = sessions[MatAnyone2Core.Model.encoder.rawValue]!.provider
        // (OpenVINO runs on the host's memory: the host path, which Swift does fastest there.)
        let onDevice = options.dataPlacement == .device || (options.dataPlacement == .automatic && [.cuda, .tensorrt].contains(provider))
        if onDevice {
            var config = options.session
            // TensorRT would build an engine for every shape of these tiny graphs (the bank grows frame by
            // frame): they run on CUDA, in the same GPU memory.
            config.provider = provider == .tensorrt ? .cuda : provider
            deviceGraphs = try DeviceGraphs(runtime: runtime, keyDim: smallest.keyDim, valueDim: smallest.valueDim, config: config)
        } else {
            deviceGraphs = nil
        }
    }

    var provider: ExecutionProvider { sessions[MatAnyone2Core.Model.encoder.rawValue]!.provider }

    /// One core per person slot at this working size; the first owns the encoder's tensors and
    /// encodes each frame once for all of them.
    func tracks(width: Int, height: Int, parameters: MatAnyone2Parameters) throws -> LocalTracks {
        var built: [MatAnyone2Core] = []
        for _ in 0..<parameters.maxPeople {
            built.append(try MatAnyone2Core(manifest: manifest, manifestPath: directory + "/manifest.json", sessions: sessions,
                                            width: width, height: height, parameters: parameters,
                                            deviceGraphs: deviceGraphs, sharingEncoderWith: built.first))
        }
        return LocalTracks(cores: built)
    }

    /// precision=bf16 runs on CPUs that compute bf16, through OpenVINO on the CPU, from a runtime that has
    /// it: runtime-library when set, else the OpenVINO build set-up installs (never the plain CPU build,
    /// which has no bf16 path).
    static func openBf16Runtime(_ options: EngineOptions) throws -> OnnxRuntime {
        if let problem = options.cpuFeatures.bf16Problem { throw EngineError.badSettings(detail: problem) }
        guard [.cpu, .auto, .openvino].contains(options.session.provider) else {
            throw EngineError.badSettings(detail: "precision=bf16 is CPU arithmetic (OpenVINO on the CPU) and cannot run with "
                                              + "execution-provider=\(options.session.provider.rawValue): on a GPU use precision=fp16, "
                                              + "or set execution-provider=cpu")
        }
        var path = options.runtimeLibrary
        if path.isEmpty {
            path = OnnxRuntime.openvinoLibraryPath
            guard FileManager.default.fileExists(atPath: path) else {
                throw EngineError.runtimeUnavailable(detail: "precision=bf16 runs through ONNX Runtime's OpenVINO build, which is "
                                                         + "not installed at \(path). " + setupHint)
            }
        }
        let runtime = try OnnxRuntime.shared(explicitPath: path)
        guard runtime.availableProviders().contains(ExecutionProvider.openvino.ortName) else {
            throw EngineError.badSettings(detail: "precision=bf16 runs through OpenVINO, and the ONNX Runtime at \(runtime.libraryPath) "
                                              + "has no OpenVINO execution provider: leave runtime-library empty (scripts/setup.sh "
                                              + "installs the OpenVINO build into \(OnnxRuntime.openvinoLibraryPath)), or name that build")
        }
        return runtime
    }
}
