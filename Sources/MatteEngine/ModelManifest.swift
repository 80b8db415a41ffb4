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
    /// manifest for that engine is accepted too, so users can point straight at a set.
    public static func engineDir(modelDir: String, engine: String) -> String {
        let direct = modelDir + "/manifest.json"
        if let manifest = try? ModelManifest.load(directory: modelDir), manifest.engine == engine,
           FileManager.default.fileExists(atPath: direct) {
            return modelDir
        }
        return modelDir + "/" + engine
    }

    public static func hasModelSet(modelDir: String, engine: String) -> Bool {
        FileManager.default.fileExists(atPath: engineDir(modelDir: modelDir, engine: engine) + "/manifest.json")
    }

    /// The MatAnyone2 set of a precision: `matanyone2/` (fp32) or `matanyone2-int8/`, the set
    /// tools/matanyone2/quantize.py makes beside it. A `modelDir` that is itself a MatAnyone2 set is
    /// taken as it is, so that the engine can say which precision it holds if it is the wrong one.
    public static func matAnyone2Dir(modelDir: String, precision: ModelPrecision) -> String {
        let engine = EngineKind.matanyone2.rawValue
        if let manifest = try? ModelManifest.load(directory: modelDir), manifest.engine == engine {
            return modelDir
        }
        return modelDir + "/" + (precision == .fp32 ? engine : engine + "-" + precision.rawValue)
    }

    public static func hasMatAnyone2Set(modelDir: String, precision: ModelPrecision) -> Bool {
        FileManager.default.fileExists(atPath: matAnyone2Dir(modelDir: modelDir, precision: precision) + "/manifest.json")
    }
}

/// Numeric precision of a model set: fp32 as exported, or int8 (QDQ, statically calibrated).
public enum ModelPrecision: String, CaseIterable, Sendable {
    case fp32, int8
}

/// `manifest.json` beside each model set: which engine it serves, its licence and each model file with
/// the inputs and outputs the engine expects. Written by the Python tools (`tools/`).
public struct ModelManifest: Decodable {
    public struct Port: Decodable {
        public let name: String
        /// Ints, or strings for dynamic dimensions (decoded as -1; the string is in `symbols`).
        public let shape: [Int]
        /// Per dimension: nil for a fixed size, else the exporter's symbol ("H", "W/16", …).
        public let symbols: [String?]
        public let dtype: String?

        /// The shape for a padded working size: "H"/"W" are the size, "H/16" a sixteenth, etc.
        public func concreteShape(height: Int, width: Int) throws -> [Int] {
            try zip(shape, symbols).map { size, symbol in
                guard let symbol else { return size }
                let parts = symbol.split(separator: "/")
                guard let axis = parts.first, axis == "H" || axis == "W" else {
                    throw EngineError.modelInvalid(path: name, detail: "unknown dimension '\(symbol)' of '\(name)'")
                }
                let divisor = parts.count > 1 ? Int(parts[1]) ?? 0 : 1
                guard divisor > 0 else {
                    throw EngineError.modelInvalid(path: name, detail: "unknown dimension '\(symbol)' of '\(name)'")
                }
                return (axis == "H" ? height : width) / divisor
            }
        }

        enum CodingKeys: String, CodingKey { case name, shape, dtype }
        public init(from decoder: Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            name = try container.decode(String.self, forKey: .name)
            dtype = try container.decodeIfPresent(String.self, forKey: .dtype)
            var dims = try container.nestedUnkeyedContainer(forKey: .shape)
            var shape: [Int] = []
            var symbols: [String?] = []
            while !dims.isAtEnd {
                if let value = try? dims.decode(Int.self) {
                    shape.append(value)
                    symbols.append(nil)
                } else {
                    symbols.append(try dims.decode(String.self))
                    shape.append(-1)
                }
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
    public let license: String?
    public let models: [String: Model]
    /// Engine parameters recorded by the exporter (e.g. MatAnyone2's key_dim); all optional.
    public let config: [String: Double]?
    public let dynamicSize: Bool?
    public let sizeMultiple: Int?
    /// int8 when the quantizer wrote the set (its manifest has an `int8` section), else fp32.
    public let precision: ModelPrecision

    enum CodingKeys: String, CodingKey {
        case format, engine, license, models, config, int8
        case dynamicSize = "dynamic_size"
        case sizeMultiple = "size_multiple"
    }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        format = try container.decode(Int.self, forKey: .format)
        engine = try container.decode(String.self, forKey: .engine)
        license = try container.decodeIfPresent(String.self, forKey: .license)
        models = try container.decode([String: Model].self, forKey: .models)
        // Only the numeric entries of config matter to the engine; others are informational.
        config = (try? container.decodeIfPresent([String: LenientNumber].self, forKey: .config))?
            .flatMap { $0.compactMapValues(\.value) }
        dynamicSize = try container.decodeIfPresent(Bool.self, forKey: .dynamicSize)
        sizeMultiple = try container.decodeIfPresent(Int.self, forKey: .sizeMultiple)
        precision = container.contains(.int8) ? .int8 : .fp32
    }

    private struct LenientNumber: Decodable {
        let value: Double?
        init(from decoder: Decoder) throws {
            let container = try decoder.singleValueContainer()
            value = try? container.decode(Double.self)
        }
    }

    public static func load(directory: String) throws -> ModelManifest {
        let path = directory + "/manifest.json"
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw EngineError.modelMissing(path: directory, hint: "The model folder does not exist. " + setupHint)
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw EngineError.modelMissing(path: path, hint: "The model folder has no manifest.json. " + setupHint)
        }
        do {
            return try JSONDecoder().decode(ModelManifest.self, from: data)
        } catch {
            throw EngineError.modelInvalid(path: path, detail: "manifest.json cannot be read (\(error)). " + setupHint)
        }
    }

    /// Checks that the manifest serves `engine`, lists `required` models and that each file exists.
    public func validate(directory: String, engine expected: String, required: [String]) throws {
        let path = directory + "/manifest.json"
        guard format == 1 else {
            throw EngineError.modelInvalid(path: path, detail: "manifest format \(format) is not supported (need 1)")
        }
        guard engine == expected else {
            throw EngineError.modelInvalid(path: path, detail: "manifest is for engine '\(engine)', not '\(expected)'")
        }
        for name in required {
            guard let model = models[name] else {
                throw EngineError.modelInvalid(path: path, detail: "manifest lists no model '\(name)'")
            }
            let file = directory + "/" + model.file
            guard FileManager.default.fileExists(atPath: file) else {
                throw EngineError.modelMissing(path: file, hint: "The manifest lists it but the file is absent. " + setupHint)
            }
        }
    }

    /// Opens model `name` and checks its declared ports against the manifest, so a manifest and file
    /// that disagree fail at start, not on the first frame.
    public func openSession(_ name: String, directory: String, runtime: OnnxRuntime, config: SessionConfig) throws -> Session {
        let model = models[name]!
        let file = directory + "/" + model.file
        let session = try Session(runtime: runtime, name: name, path: file, config: config)
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
