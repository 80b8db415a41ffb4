import MatteEngine

/// A GEnum exposed as a property: `nick` is what gst-launch users type.
protocol PropertyEnum: CaseIterable, RawRepresentable where RawValue == Int32 {
    static var typeName: String { get }
    var nick: String { get }
    var blurb: String { get }
}

enum OutputMode: Int32, PropertyEnum {
    case auto = 0, alpha, composite
    static let typeName = "GstMatAnyoneOutput"
    var nick: String { ["auto", "alpha", "composite"][Int(rawValue)] }
    var blurb: String {
        switch self {
        case .auto: return "Follow downstream caps (GRAY8 → alpha, BGRA/RGBA → composite)"
        case .alpha: return "The alpha plane alone (GRAY8)"
        case .composite: return "The frame composited with the matte (BGRA or RGBA)"
        }
    }
}

enum BackgroundMode: Int32, PropertyEnum {
    case none = 0, color, blur
    static let typeName = "GstMatAnyoneBackground"
    var nick: String { ["none", "color", "blur"][Int(rawValue)] }
    var blurb: String {
        switch self {
        case .none: return "Keep the frame; the matte becomes its alpha channel (straight alpha)"
        case .color: return "Flatten over background-color"
        case .blur: return "Flatten over a blurred copy of the frame"
        }
    }
}

enum EngineChoice: Int32, PropertyEnum {
    case auto = 0, segmenter, matanyone2
    static let typeName = "GstMatAnyoneEngine"
    var nick: String { ["auto", "segmenter", "matanyone2"][Int(rawValue)] }
    var blurb: String {
        switch self {
        case .auto: return "MatAnyone2 when its model set is installed, else the segmenter"
        case .segmenter: return "Per-frame person segmentation (MediaPipe selfie, Apache-2.0)"
        case .matanyone2: return "MatAnyone2 memory-based video matting"
        }
    }
}

enum ProviderChoice: Int32, PropertyEnum {
    case cpu = 0, cuda, tensorrt, openvino, auto
    static let typeName = "GstMatAnyoneExecutionProvider"
    var nick: String { ["cpu", "cuda", "tensorrt", "openvino", "auto"][Int(rawValue)] }
    var blurb: String {
        switch self {
        case .cpu: return "CPU"
        case .cuda: return "NVIDIA CUDA"
        case .tensorrt: return "NVIDIA TensorRT (CUDA, then CPU for the rest)"
        case .openvino: return "Intel OpenVINO"
        case .auto: return "The best the loaded ONNX Runtime offers (TensorRT, CUDA, OpenVINO), else CPU"
        }
    }
}

enum SeedMode: Int32, PropertyEnum {
    case auto = 0, mask
    static let typeName = "GstMatAnyoneSeed"
    var nick: String { ["auto", "mask"][Int(rawValue)] }
    var blurb: String {
        switch self {
        case .auto: return "The person segmenter seeds the tracker on the first frame where it finds a person"
        case .mask: return "The image at seed-mask seeds the tracker"
        }
    }
}

enum PrecisionChoice: Int32, PropertyEnum {
    case fp32 = 0, int8
    static let typeName = "GstMatAnyonePrecision"
    var nick: String { ["fp32", "int8"][Int(rawValue)] }
    var blurb: String {
        switch self {
        case .fp32: return "The exported float32 MatAnyone2 set (matanyone2/)"
        case .int8: return "The int8 QDQ set made by tools/matanyone2/quantize.py (matanyone2-int8/): faster on CPUs, less exact"
        }
    }
}

/// Everything a user can set. Guarded by `MatteFilter.settingsLock`; the streaming thread works on a
/// snapshot taken at the start of each operation.
struct Settings: Equatable {
    var output = OutputMode.auto
    var background = BackgroundMode.none
    /// ARGB, as `compositor`'s background colour.
    var backgroundColor: UInt32 = 0xFF00_B140
    var modelDir = ModelLocations.defaultModelDir
    var engine = EngineChoice.auto
    var statsInterval: UInt32 = 0
    var runtimeLibrary = ""
    var threads: UInt32 = 0
    var executionProvider = ProviderChoice.cpu
    // MatAnyone2 (upstream defaults).
    var seed = SeedMode.auto
    var seedMask = ""
    var memEvery: UInt32 = 5
    var maxMemFrames: UInt32 = 5
    var topK: UInt32 = 30
    var warmup: UInt32 = 10
    var workingSize: UInt32 = 288
    var precision = PrecisionChoice.fp32
}

/// Property ids (GObject reserves 0).
enum PropertyID: UInt32, CaseIterable {
    case output = 1, background, backgroundColor, modelDir, engine, statsInterval, runtimeLibrary, threads,
         executionProvider, seed, seedMask, memEvery, maxMemFrames, topK, warmup, workingSize, precision
}

/// How a property is declared: kind, default, range and when it may change.
struct PropertyDeclaration {
    enum Kind {
        case enumeration(typeName: String, defaultValue: Int32)
        case string(defaultValue: String)
        case uint(minimum: UInt32, maximum: UInt32, defaultValue: UInt32)
    }

    /// Model-affecting properties change only in READY (or NULL); the rest also while playing.
    enum Mutability { case ready, playing }

    let id: PropertyID
    let name: String
    let nick: String
    let blurb: String
    let kind: Kind
    let mutability: Mutability

    static let all: [PropertyDeclaration] = {
        let defaults = Settings()
        return [
            PropertyDeclaration(
                id: .output, name: "output", nick: "Output",
                blurb: "What the source pad carries: auto follows the downstream caps",
                kind: .enumeration(typeName: OutputMode.typeName, defaultValue: defaults.output.rawValue),
                mutability: .ready),
            PropertyDeclaration(
                id: .background, name: "background", nick: "Background",
                blurb: "Background of the composite output",
                kind: .enumeration(typeName: BackgroundMode.typeName, defaultValue: defaults.background.rawValue),
                mutability: .playing),
            PropertyDeclaration(
                id: .backgroundColor, name: "background-color", nick: "Background colour",
                blurb: "Colour under the person for background=color, as ARGB (0xAARRGGBB)",
                kind: .uint(minimum: 0, maximum: .max, defaultValue: defaults.backgroundColor),
                mutability: .playing),
            PropertyDeclaration(
                id: .modelDir, name: "model-dir", nick: "Model folder",
                blurb: "Folder with the model sets (segmenter/, matanyone2/, each with manifest.json)",
                kind: .string(defaultValue: defaults.modelDir), mutability: .ready),
            PropertyDeclaration(
                id: .engine, name: "engine", nick: "Engine",
                blurb: "Matting engine",
                kind: .enumeration(typeName: EngineChoice.typeName, defaultValue: defaults.engine.rawValue),
                mutability: .ready),
            PropertyDeclaration(
                id: .statsInterval, name: "stats-interval", nick: "Stats interval",
                blurb: "Post a matanyone-stats element message every N frames (0 = never)",
                kind: .uint(minimum: 0, maximum: 1_000_000, defaultValue: defaults.statsInterval),
                mutability: .playing),
            PropertyDeclaration(
                id: .runtimeLibrary, name: "runtime-library", nick: "ONNX Runtime library",
                blurb: "Path of libonnxruntime.so to load (empty: the one set-up installed, then the system's)",
                kind: .string(defaultValue: defaults.runtimeLibrary), mutability: .ready),
            PropertyDeclaration(
                id: .threads, name: "threads", nick: "Threads",
                blurb: "Inference threads (0 = one per core)",
                kind: .uint(minimum: 0, maximum: 256, defaultValue: defaults.threads), mutability: .ready),
            PropertyDeclaration(
                id: .executionProvider, name: "execution-provider", nick: "Execution provider",
                blurb: "Where ONNX Runtime runs the models",
                kind: .enumeration(typeName: ProviderChoice.typeName, defaultValue: defaults.executionProvider.rawValue),
                mutability: .ready),
            PropertyDeclaration(
                id: .seed, name: "seed", nick: "Seed",
                blurb: "How MatAnyone2 gets its first-frame mask (until seeded, frames pass through with alpha 255)",
                kind: .enumeration(typeName: SeedMode.typeName, defaultValue: defaults.seed.rawValue),
                mutability: .ready),
            PropertyDeclaration(
                id: .seedMask, name: "seed-mask", nick: "Seed mask",
                blurb: "Image (PNG, JPEG, …; white = the person) that seeds MatAnyone2 with seed=mask; resized to the frame",
                kind: .string(defaultValue: defaults.seedMask), mutability: .playing),
            PropertyDeclaration(
                id: .memEvery, name: "mem-every", nick: "Memory interval",
                blurb: "MatAnyone2: store a memory frame every N frames",
                kind: .uint(minimum: 0, maximum: 1000, defaultValue: defaults.memEvery), mutability: .ready),
            PropertyDeclaration(
                id: .maxMemFrames, name: "max-mem-frames", nick: "Memory frames",
                blurb: "MatAnyone2: frames in working memory (the first frame plus the most recent ones)",
                kind: .uint(minimum: 0, maximum: 100, defaultValue: defaults.maxMemFrames), mutability: .ready),
            PropertyDeclaration(
                id: .topK, name: "top-k", nick: "Top k",
                blurb: "MatAnyone2: memory entries each pixel reads from",
                kind: .uint(minimum: 0, maximum: 10_000, defaultValue: defaults.topK), mutability: .ready),
            PropertyDeclaration(
                id: .warmup, name: "warmup", nick: "Warm-up passes",
                blurb: "MatAnyone2: extra passes over the first frame when seeding",
                kind: .uint(minimum: 0, maximum: 100, defaultValue: defaults.warmup), mutability: .ready),
            PropertyDeclaration(
                id: .workingSize, name: "working-size", nick: "Working size",
                blurb: "MatAnyone2: short side of the size the model runs at, keeping the frame's aspect, "
                    + "multiples of 16 (0 = the frame's own size)",
                kind: .uint(minimum: 0, maximum: 4096, defaultValue: defaults.workingSize), mutability: .ready),
            PropertyDeclaration(
                id: .precision, name: "precision", nick: "Precision",
                blurb: "MatAnyone2: which model set to run; int8 must be made first (see the README)",
                kind: .enumeration(typeName: PrecisionChoice.typeName, defaultValue: defaults.precision.rawValue),
                mutability: .ready),
        ]
    }()
}

/// A property value in Swift terms, converted to and from GValue by the trampolines.
enum PropertyValue: Equatable {
    case enumeration(Int32)
    case string(String)
    case uint(UInt32)
}

extension Settings {
    func value(of id: PropertyID) -> PropertyValue {
        switch id {
        case .output: return .enumeration(output.rawValue)
        case .background: return .enumeration(background.rawValue)
        case .backgroundColor: return .uint(backgroundColor)
        case .modelDir: return .string(modelDir)
        case .engine: return .enumeration(engine.rawValue)
        case .statsInterval: return .uint(statsInterval)
        case .runtimeLibrary: return .string(runtimeLibrary)
        case .threads: return .uint(threads)
        case .executionProvider: return .enumeration(executionProvider.rawValue)
        case .seed: return .enumeration(seed.rawValue)
        case .seedMask: return .string(seedMask)
        case .memEvery: return .uint(memEvery)
        case .maxMemFrames: return .uint(maxMemFrames)
        case .topK: return .uint(topK)
        case .warmup: return .uint(warmup)
        case .workingSize: return .uint(workingSize)
        case .precision: return .enumeration(precision.rawValue)
        }
    }

    mutating func set(_ id: PropertyID, to value: PropertyValue) {
        switch (id, value) {
        case let (.output, .enumeration(raw)): output = OutputMode(rawValue: raw) ?? .auto
        case let (.background, .enumeration(raw)): background = BackgroundMode(rawValue: raw) ?? .none
        case let (.backgroundColor, .uint(color)): backgroundColor = color
        case let (.modelDir, .string(path)): modelDir = path.isEmpty ? ModelLocations.defaultModelDir : path
        case let (.engine, .enumeration(raw)): engine = EngineChoice(rawValue: raw) ?? .auto
        case let (.statsInterval, .uint(frames)): statsInterval = frames
        case let (.runtimeLibrary, .string(path)): runtimeLibrary = path
        case let (.threads, .uint(count)): threads = count
        case let (.executionProvider, .enumeration(raw)): executionProvider = ProviderChoice(rawValue: raw) ?? .cpu
        case let (.seed, .enumeration(raw)): seed = SeedMode(rawValue: raw) ?? .auto
        case let (.seedMask, .string(path)): seedMask = path
        case let (.memEvery, .uint(frames)): memEvery = frames
        case let (.maxMemFrames, .uint(frames)): maxMemFrames = frames
        case let (.topK, .uint(count)): topK = count
        case let (.warmup, .uint(passes)): warmup = passes
        case let (.workingSize, .uint(size)): workingSize = size
        case let (.precision, .enumeration(raw)): precision = PrecisionChoice(rawValue: raw) ?? .fp32
        default: break
        }
    }
}
