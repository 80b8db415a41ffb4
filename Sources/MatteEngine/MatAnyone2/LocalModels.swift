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
    /// Where each model runs (`MattingEngine.placement`).
    let placement: String

    init(options: EngineOptions, parameters: MatAnyone2Parameters) throws {
        // bf16's and model-placement's prerequisites (the CPU, the provider, the OpenVINO build) are
        // settings to change, said first.
        try LocalModels.checkPlacement(options)
        let openVinoRuntime = try LocalModels.openOpenVinoRuntime(options)
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
        // (A model placed on a GPU needs the GPU build of the runtime, which the CPU provider is part of.)
        let runtimeFor = options.placement.values.contains(where: \.onGpu) ? ExecutionProvider.cuda : options.session.provider
        let runtime = try openVinoRuntime ?? OnnxRuntime.shared(explicitPath: options.runtimeLibrary, for: runtimeFor)
        // A model placed on a provider this runtime lacks is the placement's fault, said as such.
        let available = runtime.availableProviders()
        if let name = ModelPlacement.modelNames.first(where: { options.placement[$0]?.provider.map { !available.contains($0.ortName) } ?? false }) {
            let placed = options.placement[name]!
            throw EngineError.badSettings(detail: "model-placement \(name)=\(placed.rawValue) needs ONNX Runtime's "
                                          + (placed.onGpu ? "GPU build (scripts/setup.sh --gpu installs it)" : "OpenVINO build")
                                          + ", and the one at \(runtime.libraryPath) has \(available.joined(separator: ", "))")
        }
        // The rest of the set: bf16's on the CPU provider; with execution-provider=auto and OpenVINO loaded
        // for a placement, on the CPU too, said in a warning (that build has no GPU provider).
        var rest = options.precision == .bf16 ? ExecutionProvider.cpu : options.session.provider
        var autoNote: String?
        if openVinoRuntime != nil, rest == .auto {
            rest = .cpu
            autoNote = "execution-provider=auto runs MatAnyone2 on the CPU: model-placement \(ModelPlacement.describe(options.placement)) "
                + "loads ONNX Runtime's OpenVINO build, which has no GPU provider (set execution-provider=cpu to say so, or "
                + "place no model on openvino or bf16 to let auto take a GPU)"
        }
        var choice = try runtime.choose(rest, device: options.session.device)
        let (manifest, directory) = (manifest, directory)  // the closure must not capture a half-built self
        let sessions = try runtime.open(&choice) { provider in
            var config = options.session
            config.provider = provider
            var sessions: [String: Session] = [:]
            for name in MatAnyone2Core.modelNames {
                sessions[name] = try manifest.openSession(name, directory: directory, runtime: runtime, config: config,
                                                          placement: options.placement[name])
            }
            return sessions
        }
        self.sessions = sessions
        placement = MatAnyone2Core.modelNames.map { name in
            let session = sessions[name]!
            return "\(name)=" + (session.bf16 ? "bf16" : session.provider.rawValue)
        }.joined(separator: ",")
        let anyBf16 = sessions.values.contains(where: \.bf16)
        providerNote = autoNote ?? choice.fallbackReason ?? (anyBf16 && options.cpuFeatures.bf16SlowerThanFp32
            ? "\(options.precision == .bf16 ? "precision=bf16" : "model-placement's bf16") on this CPU "
                + "(\(options.cpuFeatures.modelName)): Intel's AVX512_BF16 without AMX ran MatAnyone2 "
                + "1.17-1.29x slower than fp32 a frame where measured (scripts/bench.sh --precision bf16 measures it here); "
                + "fp32 is likely faster" : nil)
        memoryBudget = options.memoryBudget
        // The whole step schedule built once at the smallest size: a manifest whose shapes the glue
        // cannot use fails here, when the element starts, not at negotiation.
        let smallest = try MatAnyone2Core(manifest: manifest, manifestPath: directory + "/manifest.json", sessions: sessions,
                                          width: 32, height: 32, parameters: parameters)
        // On a GPU the glue's arithmetic and the memory read run there too (see DeviceGraphs), so
        // that only the frame goes up and the alpha comes down.
        let provider = sessions[MatAnyone2Core.Model.encoder.rawValue]!.provider
        // (OpenVINO runs on the host's memory: the host path, which Swift does fastest there.)
        // A model placed elsewhere reads and writes host memory, so then the data stays on the host.
        // (CUDA and TensorRT share the GPU's memory; the CPU and OpenVINO the host's.)
        let elsewhere = sessions.values.sorted(by: { $0.name < $1.name }).first(where: { $0.provider.isGpu != provider.isGpu })
        if options.dataPlacement == .device, provider.isGpu, let elsewhere {
            throw EngineError.badSettings(detail: "model-placement puts \(elsewhere.name) on \(elsewhere.provider.rawValue), and the "
                                          + "data was asked to stay in \(provider.rawValue)'s memory between models: place every model "
                                          + "on \(provider.rawValue), or keep the data on the host")
        }
        let onDevice = options.dataPlacement == .device
            || (options.dataPlacement == .automatic && provider.isGpu && elsewhere == nil)
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

    /// What `model-placement` asks that the set or the run cannot give, as a settings error. A bf16 or
    /// fp32 placement reruns the set's fp32 file another way, so the set must hold fp32 files (fp32 and
    /// bf16 do); OpenVINO and the GPU providers come from different builds of the runtime.
    static func checkPlacement(_ options: EngineOptions) throws {
        let placement = options.placement
        guard !placement.isEmpty else { return }
        let described = ModelPlacement.describe(placement)
        if ![.fp32, .bf16].contains(options.precision),
           let name = ModelPlacement.modelNames.first(where: { [.fp32, .bf16].contains(placement[$0]) }) {
            throw EngineError.badSettings(detail: "model-placement \(name)=\(placement[name]!.rawValue) runs the model's fp32 file, and "
                                          + "precision=\(options.precision.rawValue)'s set holds \(options.precision.rawValue) files: "
                                          + "use precision=fp32, bf16 or auto with it, or place \(name) on a provider (cpu, openvino, cuda, tensorrt)")
        }
        let openVino = options.precision == .bf16 || options.session.provider == .openvino
            || placement.values.contains(where: \.needsOpenVino)
        if openVino, let name = ModelPlacement.modelNames.first(where: { placement[$0]?.onGpu == true }) {
            throw EngineError.badSettings(detail: "model-placement \(described) mixes a GPU (\(name)) with OpenVINO"
                                          + (options.precision == .bf16 ? " (precision=bf16 runs through OpenVINO)"
                                             : options.session.provider == .openvino ? " (execution-provider=openvino)" : "")
                                          + ", which come from different builds of ONNX Runtime, and one engine's models run on one build")
        }
    }

    /// precision=bf16, and a model placed in bf16 or on OpenVINO, run through OpenVINO on the CPU, from a
    /// runtime that has it: runtime-library when set, else the OpenVINO build set-up installs (never the
    /// plain CPU build, which has no bf16 path). bf16 needs a CPU that computes it. nil: not needed.
    static func openOpenVinoRuntime(_ options: EngineOptions) throws -> OnnxRuntime? {
        let placedBf16 = ModelPlacement.modelNames.filter { options.placement[$0] == .bf16 }
        let placedOpenVino = ModelPlacement.modelNames.filter { options.placement[$0]?.needsOpenVino == true }
        // What asked for OpenVINO, as the messages name it.
        let asking: String
        if options.precision == .bf16 {
            asking = "precision=bf16"
        } else if !placedOpenVino.isEmpty {
            asking = "model-placement " + ModelPlacement.describe(options.placement.filter { $0.value.needsOpenVino })
        } else {
            return nil
        }
        if let problem = options.cpuFeatures.bf16Problem {
            if options.precision == .bf16 { throw EngineError.badSettings(detail: problem) }
            if !placedBf16.isEmpty {
                let cpu = options.cpuFeatures.modelName.isEmpty ? "this one" : "this one (\(options.cpuFeatures.modelName))"
                throw EngineError.badSettings(detail: "\(asking): bf16 needs a CPU that computes it (AVX512_BF16 or AMX-BF16), and "
                                              + "\(cpu) would only emulate it, slower than fp32: "
                                              + "place \(placedBf16.joined(separator: ", ")) on cpu or openvino (fp32)")
            }
        }
        guard [.cpu, .auto, .openvino].contains(options.session.provider) else {
            throw EngineError.badSettings(detail: "\(asking) is CPU arithmetic (OpenVINO on the CPU) and cannot run with "
                                              + "execution-provider=\(options.session.provider.rawValue): "
                                              + (options.precision == .bf16 ? "on a GPU use precision=fp16, or set execution-provider=cpu"
                                                 : "place \(placedOpenVino.joined(separator: ", ")) on cpu or cuda, or set execution-provider=cpu"))
        }
        var path = options.runtimeLibrary
        if path.isEmpty {
            path = OnnxRuntime.openvinoLibraryPath
            guard FileManager.default.fileExists(atPath: path) else {
                throw EngineError.runtimeUnavailable(detail: "\(asking) runs through ONNX Runtime's OpenVINO build, which is "
                                                         + "not installed at \(path). " + setupHint)
            }
        }
        let runtime = try OnnxRuntime.shared(explicitPath: path)
        guard runtime.availableProviders().contains(ExecutionProvider.openvino.ortName) else {
            throw EngineError.badSettings(detail: "\(asking) runs through OpenVINO, and the ONNX Runtime at \(runtime.libraryPath) "
                                              + "has no OpenVINO execution provider: leave runtime-library empty (scripts/setup.sh "
                                              + "installs the OpenVINO build into \(OnnxRuntime.openvinoLibraryPath)), or name that build")
        }
        return runtime
    }
}
