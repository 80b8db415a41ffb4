import Foundation

/// Where set-up puts the runtime and the models: `$XDG_DATA_HOME/gst-matanyone` (by default
/// `~/.local/share/gst-matanyone`), with `models/<engine>/manifest.json` and `onnxruntime/`.
public enum ModelLocations {
    public static var dataRoot: String {
        let environment = ProcessInfo.processInfo.environment
        if let xdg = environment["XDG_DATA_HOME"], !xdg.isEmpty { return xdg + "/gst-matanyone" }
        let home = environment["HOME"] ?? NSHomeDirectory()
        return home + "/.local/share/gst-matanyone"
    }

    public static var defaultModelDir: String { dataRoot + "/models" }

    /// The folder of one engine's model set inside `modelDir`. A `modelDir` that itself holds a
    /// manifest for that engine is accepted too, so users can point straight at a set; so is one
    /// whose manifest cannot be read, when it has no such subfolder (the error then names it). The
    /// seeders (the segmenter, RVM), which also seed MatAnyone2, are found beside a `modelDir` that is the MatAnyone2
    /// set (model-dir naming that set, with seed=auto), in the folder that holds both; MatAnyone2 is
    /// never looked for beside the segmenter's set (engine=auto there means the segmenter).
    public static func engineDir(modelDir: String, engine: String) -> String {
        setFolder(modelDir: modelDir, engine: engine, subfolder: engine, besideOtherSet: engine == EngineKind.segmenter.rawValue || engine == EngineKind.rvm.rawValue)
    }

    private static func setFolder(modelDir: String, engine: String, subfolder: String, besideOtherSet: Bool = false) -> String {
        let nested = modelDir + "/" + subfolder
        var info = stat()
        guard lstat(modelDir + "/manifest.json", &info) == 0 else { return nested }
        if let manifest = try? ModelManifest.load(directory: modelDir) {
            if manifest.engine == engine { return modelDir }
            guard besideOtherSet else { return nested }
            let sibling = (modelDir as NSString).deletingLastPathComponent + "/" + subfolder
            return !FileManager.default.fileExists(atPath: nested) && FileManager.default.fileExists(atPath: sibling) ? sibling : nested
        }
        return FileManager.default.fileExists(atPath: nested) ? nested : modelDir
    }

    public static func hasModelSet(modelDir: String, engine: String) -> Bool {
        FileManager.default.fileExists(atPath: engineDir(modelDir: modelDir, engine: engine) + "/manifest.json")
    }

    /// The MatAnyone2 set of a precision: `matanyone2/` (fp32) or `matanyone2-int8/`, the set
    /// tools/matanyone2/quantize.py makes beside it. A `modelDir` that is itself a MatAnyone2 set is
    /// taken as it is, so that the engine can say which precision it holds if it is the wrong one.
    public static func matAnyone2Dir(modelDir: String, precision: ModelPrecision) -> String {
        let engine = EngineKind.matanyone2.rawValue
        return setFolder(modelDir: modelDir, engine: engine, subfolder: precision == .fp32 ? engine : engine + "-" + precision.rawValue)
    }

    public static func hasMatAnyone2Set(modelDir: String, precision: ModelPrecision) -> Bool {
        FileManager.default.fileExists(atPath: matAnyone2Dir(modelDir: modelDir, precision: precision) + "/manifest.json")
    }
}

/// Numeric precision of a model set: fp32 as exported, int8 (QDQ, statically calibrated, for CPUs),
/// fp16 (float16 weights and arithmetic with float32 inputs/outputs, norms and softmax, for GPUs) or
/// bf16 (the fp32 files, which OpenVINO runs with bfloat16 arithmetic on CPUs that compute it).
public enum ModelPrecision: String, CaseIterable, Sendable {
    case fp32, int8, fp16, bf16

    /// The tool that makes this set from the fp32 one (nil for fp32 itself).
    var maker: String? {
        switch self {
        case .fp32: return nil
        case .int8: return "tools.matanyone2.quantize"
        case .fp16: return "tools.matanyone2.fp16"
        case .bf16: return "tools.matanyone2.bf16"
        }
    }

    /// The Python that runs the maker (bf16 measures through the onnxruntime-openvino wheel, which
    /// cannot share a virtual environment with the plain onnxruntime one).
    var makerPython: String { self == .bf16 ? ".venv-openvino/bin/python" : ".venv/bin/python" }
}

/// `manifest.json` beside each model set: which engine it serves and each model file (confined to the
/// set's folder, with its sha256 when the tools recorded one) with the inputs and outputs the engine
/// expects. Written by the Python tools (`tools/`).
public struct ModelManifest: Decodable {
    public struct Port: Decodable {
        public let name: String
        /// Ints, or strings for dynamic dimensions (decoded as -1; the string is in `symbols`).
        public let shape: [Int]
        /// Per dimension: nil for a fixed size, else the exporter's symbol ("H", "W/16", …).
        public let symbols: [String?]

        /// The shape for a padded working size: "H"/"W" are the size, "H/16" a sixteenth, etc.
        public func concreteShape(height: Int, width: Int) throws -> [Int] {
            try zip(shape, symbols).map { size, symbol in
                guard let symbol else { return size }
                let parts = symbol.split(separator: "/", omittingEmptySubsequences: false)
                let divisor = parts.count == 2 ? Int(parts[1]) ?? 0 : (parts.count == 1 ? 1 : 0)
                guard let axis = parts.first, axis == "H" || axis == "W", divisor > 0 else {
                    throw EngineError.modelInvalid(path: name, detail: "unknown dimension '\(symbol)' of '\(name)'")
                }
                return (axis == "H" ? height : width) / divisor
            }
        }

        enum CodingKeys: String, CodingKey { case name, shape }
        public init(from decoder: Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            name = try container.decode(String.self, forKey: .name)
            var dims = try container.nestedUnkeyedContainer(forKey: .shape)
            var shape: [Int] = []
            var symbols: [String?] = []
            while !dims.isAtEnd {
                if let value = try? dims.decode(Int.self) {
                    // A fixed size must be a real one: negative sizes would read as "dynamic" below.
                    guard value >= 1, value <= 1 << 24 else {
                        throw DecodingError.dataCorruptedError(in: dims, debugDescription:
                            "dimension \(value) of '\(name)' is not a size (1 … 16777216)")
                    }
                    shape.append(value)
                    symbols.append(nil)
                } else {
                    symbols.append(try dims.decode(String.self))
                    shape.append(-1)
                }
            }
            guard shape.count <= 8 else {
                throw DecodingError.dataCorruptedError(in: dims, debugDescription: "'\(name)' has \(shape.count) dimensions")
            }
            self.shape = shape
            self.symbols = symbols
        }
    }

    public struct Model: Decodable {
        public let file: String
        public let sha256: String?
        public let inputs: [Port]
        public let outputs: [Port]
    }

    public let format: Int
    public let engine: String
    public let models: [String: Model]
    public let dynamicSize: Bool?
    /// The licence of the weights, as the tool that wrote the set names it ("GPL-3.0", …).
    public let license: String?
    /// The manifest's `precision`; else int8 when the quantizer wrote the set (it has an `int8`
    /// section), else fp32.
    public let precision: ModelPrecision
    /// A bf16 set: the models OpenVINO runs in bf16 (the others run in fp32 on the CPU provider).
    public let bf16Models: [String]

    private struct Bf16Section: Decodable { let models: [String] }

    enum CodingKeys: String, CodingKey {
        case format, engine, models, int8, precision, bf16, license
        case dynamicSize = "dynamic_size"
    }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        format = try container.decode(Int.self, forKey: .format)
        engine = try container.decode(String.self, forKey: .engine)
        models = try container.decode([String: Model].self, forKey: .models)
        dynamicSize = try container.decodeIfPresent(Bool.self, forKey: .dynamicSize)
        license = try? container.decodeIfPresent(String.self, forKey: .license)
        if let named = try container.decodeIfPresent(String.self, forKey: .precision) {
            guard let known = ModelPrecision(rawValue: named) else {
                throw DecodingError.dataCorruptedError(forKey: .precision, in: container,
                                                       debugDescription: "unknown precision \"\(named)\"")
            }
            precision = known
        } else {
            precision = container.contains(.int8) ? .int8 : .fp32
        }
        bf16Models = try container.decodeIfPresent(Bf16Section.self, forKey: .bf16)?.models ?? []
    }

    /// Manifests are a few KB; anything past this is not one (and is not read whole).
    static let maximumManifestBytes = 16 << 20
    /// ONNX files cannot pass 2 GiB (protobuf's limit).
    static let maximumModelBytes = 2 << 30

    public static func load(directory: String) throws -> ModelManifest {
        let path = directory + "/manifest.json"
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            // Inside another engine's set: model-dir names that set, and this one is not beside it either.
            let parent = (directory as NSString).deletingLastPathComponent
            if let other = try? ModelManifest.load(directory: parent) {
                let wanted = (directory as NSString).lastPathComponent
                let seeder = wanted == EngineKind.segmenter.rawValue
                throw EngineError.modelMissing(path: directory, hint: "model-dir \(parent) is the \(other.engine) set itself, and "
                    + "the \(wanted) set is \(seeder ? "neither inside it nor beside it" : "not inside it"): set model-dir to the "
                    + "folder that holds the \(wanted) set (scripts/setup.sh installs the sets into \(ModelLocations.defaultModelDir))"
                    + (seeder ? ", or seed MatAnyone2 from a mask (seed=mask)" : ""))
            }
            throw EngineError.modelMissing(path: directory, hint: "The model folder does not exist. " + setupHint)
        }
        let bytes: [UInt8]
        do {
            bytes = try SafeFile.read(path, maxBytes: maximumManifestBytes)
        } catch FileProblem.missing {
            throw EngineError.modelMissing(path: path, hint: "The model folder has no manifest.json. " + setupHint)
        } catch let problem as FileProblem {
            throw fileError(path, problem)
        }
        do {
            return try JSONDecoder().decode(ModelManifest.self, from: Data(bytes))
        } catch {
            throw EngineError.modelInvalid(path: path, detail: "manifest.json cannot be read (\(error)). " + setupHint)
        }
    }

    /// A file of the set that exists but cannot be used, as the user should read it.
    static func fileError(_ path: String, _ problem: FileProblem) -> EngineError {
        switch problem {
        case .missing:
            return .modelMissing(path: path, hint: "The manifest lists it but the file is absent. " + setupHint)
        case .permissionDenied:
            return .fileUnreadable(path: path, detail: "permission denied; make it readable by this user")
        default:
            return .modelInvalid(path: path, detail: "it \(problem). " + setupHint)
        }
    }

    /// Checks that the manifest serves `engine`, lists `required` models and that each file exists
    /// inside the set's folder.
    public func validate(directory: String, engine expected: String, required: [String]) throws {
        let path = directory + "/manifest.json"
        guard format == 1 else {
            throw EngineError.modelInvalid(path: path, detail: "manifest format \(format) is not supported (need 1)")
        }
        guard engine == expected else {
            throw EngineError.modelInvalid(path: path, detail: "manifest is for engine '\(engine)', not '\(expected)'")
        }
        for name in required {
            guard models[name] != nil else {
                throw EngineError.modelInvalid(path: path, detail: "manifest lists no model '\(name)'")
            }
            _ = try modelFile(name, directory: directory)
        }
        if let unknown = bf16Models.first(where: { models[$0] == nil }) {
            throw EngineError.modelInvalid(path: path, detail: "bf16.models names '\(unknown)', which the set does not have. " + setupHint)
        }
    }

    /// The resolved path of model `name`'s file: a name inside the set's folder (no absolute path, no
    /// `..`, no symlink leading out), so a manifest cannot make the element read other files.
    func modelFile(_ name: String, directory: String) throws -> String {
        let listed = models[name]?.file ?? ""
        do {
            let resolved = try SafeFile.resolve(listed, inside: directory)
            _ = try SafeFile.checkRegular(resolved, maxBytes: ModelManifest.maximumModelBytes)
            return resolved
        } catch let problem as FileProblem {
            let shown = listed.hasPrefix("/") ? listed : directory + "/" + listed
            if case .outsideFolder = problem {
                throw EngineError.modelInvalid(path: directory + "/manifest.json",
                                               detail: "model '\(name)' names '\(listed)', which \(problem). Re-export the model set.")
            }
            throw ModelManifest.fileError(shown, problem)
        }
    }

    /// Opens model `name` (its bytes read once, checked against the manifest's sha256 when it gives one)
    /// and checks its declared ports against the manifest, so a manifest and file that disagree fail at
    /// start, not on the first frame.
    /// `placement` (MatAnyone2's `model-placement`) overrides the set's own choice for this model.
    public func openSession(_ name: String, directory: String, runtime: OnnxRuntime, config: SessionConfig,
                            placement: ModelPlacement? = nil) throws -> Session {
        let model = models[name]!
        let file = try modelFile(name, directory: directory)
        let bytes: [UInt8]
        do {
            bytes = try SafeFile.read(file, maxBytes: ModelManifest.maximumModelBytes)
        } catch let problem as FileProblem {
            throw ModelManifest.fileError(file, problem)
        }
        if let expected = model.sha256?.lowercased() {
            let actual = bytes.withUnsafeBytes { SafeFile.sha256($0) }.map { String(format: "%02x", $0) }.joined()
            guard actual == expected else {
                throw EngineError.modelInvalid(path: file, detail: "its sha256 is \(actual) but the manifest says \(expected): "
                                               + "the file is damaged or was replaced. " + setupHint)
            }
        }
        var config = config
        config.cacheDirectory = directory
        config.fp16 = precision == .fp16
        config.bf16 = placement.map { $0 == .bf16 } ?? bf16Models.contains(name)
        if let provider = placement?.provider {
            config.provider = provider
        } else if config.bf16 {
            config.provider = .openvino
        }
        let session = try Session(runtime: runtime, name: name, path: file, model: bytes, config: config)
        let declared = (model.inputs, model.outputs)
        for (ports, actual, kind) in [(declared.0, session.inputs, "input"), (declared.1, session.outputs, "output")] {
            for port in ports {
                guard let found = actual.first(where: { $0.name == port.name }) else {
                    throw EngineError.modelInvalid(
                        path: file, detail: "the manifest lists \(kind) '\(port.name)' but the model has "
                            + actual.map(\.name).joined(separator: ", ") + ". Re-export the model set.")
                }
                let agrees = found.shape.count == port.shape.count
                    && zip(found.shape, port.shape).allSatisfy { $0 < 0 || $1 < 0 || $0 == $1 }
                guard agrees else {
                    throw EngineError.modelInvalid(
                        path: file, detail: "\(kind) '\(port.name)' has shape \(found.shape) in the file but "
                            + "\(port.shape) in the manifest. Re-export the model set.")
                }
            }
        }
        return session
    }
}

/// A set of one model (the segmenter's, RVM's): its folder found in `modelDir`, its manifest checked,
/// its session opened where `options` asks (execution-provider=auto resolved), with why auto fell back.
struct SingleModelSet {
    let directory: String
    let manifest: ModelManifest
    let session: Session
    /// Why execution-provider=auto runs on the CPU (nil when it does not).
    let providerNote: String?
    let runtime: OnnxRuntime

    /// The set is checked before `runtime` loads the runtime (a missing set is the error to see first).
    init(engine: EngineKind, options: EngineOptions, placement: ModelPlacement? = nil, runtime load: () throws -> OnnxRuntime) throws {
        let name = engine.rawValue
        let directory = ModelLocations.engineDir(modelDir: options.modelDir, engine: name)
        let manifest = try ModelManifest.load(directory: directory)
        try manifest.validate(directory: directory, engine: name, required: [name])
        let runtime = try load()
        self.runtime = runtime
        var choice = try runtime.choose(options.session.provider, device: options.session.device)
        session = try runtime.open(&choice) { provider in
            var config = options.session
            config.provider = provider
            return try manifest.openSession(name, directory: directory, runtime: runtime, config: config, placement: placement)
        }
        providerNote = choice.fallbackReason
        self.directory = directory
        self.manifest = manifest
    }
}
