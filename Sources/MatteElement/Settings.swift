import MatteEngine
import MattePixels

/// A GEnum exposed as a property. The GEnum value is the case's position in `allCases`; `nick` is
/// what gst-launch users type. Engine enums (execution provider, precision, engine choice) are
/// registered as they are: one enum per concept, no mirror types to keep in step.
protocol PropertyEnum: CaseIterable, Equatable {
    static var typeName: String { get }
    var nick: String { get }
    var blurb: String { get }
}

/// Every enum's nick is its raw value (dashed where it has words: the GEnum convention).
extension PropertyEnum where Self: RawRepresentable, Self.RawValue == String {
    var nick: String { rawValue }
}

extension PropertyEnum {
    var gValue: Int32 { Int32(Array(Self.allCases).firstIndex(of: self)!) }
    init?(gValue: Int32) {
        let cases = Array(Self.allCases)
        guard gValue >= 0, Int(gValue) < cases.count else { return nil }
        self = cases[Int(gValue)]
    }
}

enum OutputMode: String, PropertyEnum {
    case auto, alpha, composite
    static let typeName = "GstMatAnyoneOutput"
    var blurb: String {
        switch self {
        case .auto: return "Follow downstream caps (GRAY8 → alpha, BGRA/RGBA → composite)"
        case .alpha: return "The alpha plane alone (GRAY8)"
        case .composite: return "The frame composited with the matte (BGRA or RGBA)"
        }
    }
}

/// Which colour the composite gives the person where the matte is soft.
enum EdgeColors: String, PropertyEnum {
    case estimated, original
    static let typeName = "GstMatAnyoneEdgeColors"
    var blurb: String {
        switch self {
        case .estimated: return "The person's own colour, estimated at soft edges (no halo of the old background)"
        case .original: return "The frame's pixel, which mixes in the old background at soft edges (plain blending)"
        }
    }
}

/// mode=async: what a frame that leaves with an older frame's alpha wears.
enum Alignment: String, PropertyEnum {
    case motion, none
    static let typeName = "GstMatAnyoneAlignment"
    var blurb: String {
        switch self {
        case .motion: return "The alpha carried along the picture's motion since its frame (stale where the motion is in doubt)"
        case .none: return "The alpha as it was computed, on its older frame"
        }
    }
}

/// How a composite's colour relates to its alpha. GStreamer's BGRA/RGBA are straight; keyers and
/// playout servers often want premultiplied (caps cannot say which: see the README).
enum AlphaMode: String, PropertyEnum {
    case straight, premultiplied
    static let typeName = "GstMatAnyoneAlphaMode"
    var blurb: String {
        switch self {
        case .straight: return "Colour as it is, alpha beside it (GStreamer's BGRA/RGBA)"
        case .premultiplied: return "Colour multiplied by alpha (for keyers and playout servers that expect it)"
        }
    }
}

/// The colour range a GRAY8 alpha's caps carry. Its values are 0 (transparent) to 255 (opaque) either
/// way: the label is for the element downstream. alphacombine combines only streams of one label and
/// takes the alpha bytes as they are, so beside a limited-range main stream (a default I420/NV12) the
/// alpha must say limited; videoconvert reads the label and would stretch a limited-labelled alpha.
enum GrayRange: String, PropertyEnum {
    case full, limited
    static let typeName = "GstMatAnyoneGrayRange"
    var blurb: String {
        switch self {
        case .full: return "Full range, what the values are (for videoconvert, encoders, files); downstream caps may ask for another label"
        case .limited: return "Limited range, values still 0-255 (for alphacombine beside a limited-range main stream, such as a default I420)"
        }
    }
}

extension SharedMemoryUse: PropertyEnum {
    static let typeName = "GstMatAnyoneSharedMemory"
    var blurb: String {
        switch self {
        case .auto: return "When the server's address is this machine's and it maps the regions; else in the HTTP bodies"
        case .on: return "Always (an error when the server cannot map them)"
        case .off: return "Never: frames and mattes in the HTTP bodies"
        }
    }
}

extension ServerFrameFormat: PropertyEnum {
    static let typeName = "GstMatAnyoneServerFrameFormat"
    var blurb: String {
        switch self {
        case .float32: return "The model's own input, float32 RGB at working size: the server computes what this process would"
        case .uint8: return "8-bit RGB at working size: a quarter of the bytes; the model sees the scaled frame rounded to 8 bits"
        }
    }
}

extension BackgroundMode: PropertyEnum {
    static let typeName = "GstMatAnyoneBackground"
    var blurb: String {
        switch self {
        case .none: return "Keep the frame; the matte becomes its alpha channel (straight alpha)"
        case .color: return "Flatten over background-color"
        case .blur: return "Flatten over a blurred copy of the frame"
        }
    }
}

enum MatteMode: String, PropertyEnum {
    case sync, async
    static let typeName = "GstMatAnyoneMode"
    var blurb: String {
        switch self {
        case .sync: return "Every frame waits for its own alpha (output rate = inference rate)"
        case .async: return "Inference on its own thread on the newest frame; every frame leaves at once with the newest alpha"
        }
    }
}

enum SeedMode: String, PropertyEnum {
    case auto, mask
    static let typeName = "GstMatAnyoneSeed"
    var blurb: String {
        switch self {
        case .auto: return "The person segmenter seeds the tracker on the first frame where it finds a person"
        case .mask: return "The image at seed-mask seeds the tracker"
        }
    }
}

extension EngineChoice: PropertyEnum {
    static let typeName = "GstMatAnyoneEngine"
    var blurb: String {
        switch self {
        case .auto: return "MatAnyone2 when its model set is installed (or inference-server is set), else RVM when "
            + "installed, else the segmenter; the stats' engine says which ran"
        case .segmenter: return "Per-frame person segmentation (MediaPipe selfie, Apache-2.0): a soft person mask"
        case .matanyone2: return "MatAnyone2 memory-based video matting (official weights: NTU S-Lab License 1.0, non-commercial)"
        case .rvm: return "Robust Video Matting, MobileNetV3 (GPL-3.0): recurrent video matting of everyone in the picture"
        }
    }
}

extension SeederChoice: PropertyEnum {
    static let typeName = "GstMatAnyoneSeeder"
    var blurb: String {
        switch self {
        case .auto: return "RVM where its model set is installed, else the segmenter"
        case .segmenter: return "The person segmenter's mask (MediaPipe selfie, Apache-2.0)"
        case .rvm: return "Robust Video Matting's matte (GPL-3.0): a closer first mask"
        }
    }
}

extension ExecutionProvider: PropertyEnum {
    static let typeName = "GstMatAnyoneExecutionProvider"
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

/// `precision`: a MatAnyone2 model set, or `auto` (AutoPrecision: bf16 where it pays, else fp32).
/// `auto` comes last so that the sets keep the numbers they had.
enum PrecisionChoice: String, PropertyEnum {
    case fp32, int8, fp16, bf16, auto
    static let typeName = "GstMatAnyonePrecision"

    /// The set asked for; nil for auto.
    var set: ModelPrecision? { ModelPrecision(rawValue: rawValue) }

    var blurb: String {
        switch self {
        case .fp32: return "The exported float32 MatAnyone2 set (matanyone2/)"
        case .int8: return "The int8 QDQ set made by tools/matanyone2/quantize.py (matanyone2-int8/): faster on CPUs, less exact"
        case .fp16: return "The fp16 set made by tools/matanyone2/fp16.py (matanyone2-fp16/): for GPUs (slow on CPUs)"
        case .bf16: return "The bf16 set made by tools/matanyone2/bf16.py (matanyone2-bf16/): OpenVINO's bfloat16 on CPUs that compute it (AVX512_BF16, AMX); "
            + "RVM: its own file through OpenVINO in bfloat16"
        case .auto: return "bf16 where it pays (a CPU that computes it faster than fp32, the bf16 set, the OpenVINO build), else fp32; the stats say which ran"
        }
    }
}

/// MatAnyone2's own defaults, which the element's are (`Settings` says where it differs).
private let engineDefaults = MatAnyone2Parameters()

/// Everything a user can set. Guarded by `MatteFilter`'s settings lock; the streaming thread works on
/// a snapshot taken at the start of each operation. A new property is a field here and one entry in
/// `PropertyDeclaration.all`.
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
    var executionProvider = ExecutionProvider.cpu
    /// CUDA/TensorRT: which GPU (machines with several run one pipeline per GPU).
    var gpuDevice: UInt32 = 0
    // MatAnyone2: the engine's defaults (upstream's), unless said otherwise below.
    var seed = SeedMode.auto
    var seeder = SeederChoice.auto
    var seedMask = ""
    var memEvery = UInt32(engineDefaults.memEvery)
    var maxMemFrames = UInt32(engineDefaults.maxMemFrames)
    var topK = UInt32(engineDefaults.topK)
    var warmup = UInt32(engineDefaults.warmup)
    var workingSize: UInt32 = 288
    var precision = PrecisionChoice.auto
    /// MatAnyone2: models run elsewhere than the rest of the set (`ModelPlacement`); empty: the set's own.
    var modelPlacement = ""
    /// Upstream silence (ms of stream time) after which the track starts over (GapRule); 0: every
    /// DISCONT does. 2 s: longer than a network hiccup or a leaky queue's drops, shorter than a
    /// pause after which the scene has usually changed.
    var resetAfterGap: UInt32 = 2000
    var mode = MatteMode.sync
    /// async: how long (ms) a frame may wait for an alpha closer to it in time.
    var asyncDelay: UInt32 = 0
    /// async with a delay: at most this many frames held (0: the delay's frames at the stream's rate,
    /// and four more); when full, upstream waits for the oldest to leave.
    var asyncMaxFrames: UInt32 = 0
    /// async: carry an older frame's alpha along the motion to the frame it leaves with.
    var alignment = Alignment.motion
    /// RVM: the network's downsample ratio (0: from the frame size, RVM's authors' rule).
    var downsampleRatio = 0.0
    /// Segmenter: motion-adaptive temporal smoothing in percent (0 = off).
    /// 50: halves flicker at the soft edge on two real clips while a moving edge trails by under
    /// 2.5 % (tools/flicker.py, README).
    var temporalSmoothing: UInt32 = 50
    /// MatAnyone2: people tracked at once (each with its own memory bank).
    var maxPeople = UInt32(engineDefaults.maxPeople)
    /// The quality watch: every 30 frames (1 s at 30 fps: a drifting track is caught within a few
    /// seconds, and the segmenter's run every 30th frame costs little). The one deliberate difference
    /// from the engine, whose default is no watch (0): the element watches by default.
    var watchInterval: UInt32 = 30
    /// IoU (%) below which a track disagrees with the segmenter: 25. Two good mattes of one person
    /// agree less than one would think: on test-sample2's dancer the segmenter's IoU with the
    /// hand-made first-frame mask is 0.55, and with its own next frame 0.78 median, 0.48 worst (thin,
    /// fast limbs). 25 is half the worst of those, so a soft edge or a lagging limb does not trigger
    /// it, a track that has lost its person does (README, "Quality watch").
    var watchIoU = UInt32((engineDefaults.watch.minimumIoU * 100).rounded())
    /// MatAnyone2's mean uncertainty (%) over the person above which a track disagrees. 80: only a
    /// track the model itself mostly doubts (not calibrated on the official weights, which these
    /// machines cannot download: measure with them before lowering it).
    var watchUncertainty = UInt32((engineDefaults.watch.maximumUncertainty * 100).rounded())
    /// Disagreeing checks in a row before re-seeding: 3 (one odd frame of the segmenter is not drift).
    var watchPatience = UInt32(engineDefaults.watch.patience)
    /// Alpha while nobody is tracked: 255 passes the frame through (as before the first seed).
    var noPersonAlpha = UInt32(engineDefaults.noPersonAlpha)
    /// Composites: estimate the person's colour at soft edges (ForegroundEstimator; README figures).
    var edgeColors = EdgeColors.estimated
    /// Composites with alpha below 255: straight, as GStreamer's BGRA is.
    var alphaMode = AlphaMode.straight
    /// GRAY8 output: the colour range its caps carry (the values are full range either way).
    var grayRange = GrayRange.full
    /// MatAnyone2 on an inference server (KServe v2 over HTTP): its URL; empty runs the models here.
    var inferenceServer = ""
    var serverModel = "matanyone2"
    /// A request's limit. 30 s: a seed is eleven passes in one request (~4 s on a 2-core CPU server), and
    /// a request waits behind other streams' (four streams seeding at once there: ~16 s; 10 s timed out).
    var serverTimeout: UInt32 = 30_000
    var serverTokenFile = ""
    var serverCaFile = ""
    var serverSharedMemory = SharedMemoryUse.auto
    var serverFrameFormat = ServerFrameFormat.float32
}

/// A property value in Swift terms, converted to and from GValue by the trampolines.
enum PropertyValue: Equatable {
    case enumeration(Int32)
    case string(String)
    case uint(UInt32)
    case double(Double)
}

/// How a property is declared (kind, default, range, when it may change) and where it lives in
/// `Settings`. Its GObject property id is its position in `all` + 1 (GObject reserves 0).
struct PropertyDeclaration {
    enum Kind {
        case enumeration(typeName: String, defaultValue: Int32)
        case string(defaultValue: String)
        case uint(minimum: UInt32, maximum: UInt32, defaultValue: UInt32)
        case double(minimum: Double, maximum: Double, defaultValue: Double)
    }

    /// Model-affecting properties change only in READY (or NULL); the rest also while playing.
    enum Mutability { case ready, playing }

    /// What setting the property does beyond storing its value.
    enum SideEffect {
        /// The source pad renegotiates (what it may carry changed).
        case renegotiateSource
        /// While playing with seed=mask, the new mask loads for the next (re)seed.
        case loadSeedMask
    }

    let name: String
    let nick: String
    let blurb: String
    let kind: Kind
    let mutability: Mutability
    let read: (Settings) -> PropertyValue
    /// Stores a value of this property's kind (other kinds are ignored: GObject checked the type).
    let write: (inout Settings, PropertyValue) -> Void
    private(set) var sideEffect: SideEffect?

    /// This declaration, with what setting it does besides.
    func onSet(_ effect: SideEffect) -> PropertyDeclaration {
        var declaration = self
        declaration.sideEffect = effect
        return declaration
    }

    static func enumeration<E: PropertyEnum>(_ name: String, _ nick: String, _ blurb: String, _ field: WritableKeyPath<Settings, E>,
                                             _ mutability: Mutability) -> PropertyDeclaration {
        PropertyDeclaration(
            name: name, nick: nick, blurb: blurb, kind: .enumeration(typeName: E.typeName, defaultValue: Settings()[keyPath: field].gValue),
            mutability: mutability, read: { .enumeration($0[keyPath: field].gValue) },
            write: { settings, value in
                if case let .enumeration(raw) = value, let choice = E(gValue: raw) { settings[keyPath: field] = choice }
            })
    }

    static func string(_ name: String, _ nick: String, _ blurb: String, _ field: WritableKeyPath<Settings, String>,
                       _ mutability: Mutability, emptyMeans fallback: String? = nil) -> PropertyDeclaration {
        PropertyDeclaration(
            name: name, nick: nick, blurb: blurb, kind: .string(defaultValue: Settings()[keyPath: field]),
            mutability: mutability, read: { .string($0[keyPath: field]) },
            write: { settings, value in
                if case let .string(text) = value { settings[keyPath: field] = text.isEmpty ? fallback ?? text : text }
            })
    }

    static func uint(_ name: String, _ nick: String, _ blurb: String, _ field: WritableKeyPath<Settings, UInt32>,
                     _ range: ClosedRange<UInt32>, _ mutability: Mutability) -> PropertyDeclaration {
        PropertyDeclaration(
            name: name, nick: nick, blurb: blurb,
            kind: .uint(minimum: range.lowerBound, maximum: range.upperBound, defaultValue: Settings()[keyPath: field]),
            mutability: mutability, read: { .uint($0[keyPath: field]) },
            write: { settings, value in if case let .uint(number) = value { settings[keyPath: field] = number } })
    }

    static func double(_ name: String, _ nick: String, _ blurb: String, _ field: WritableKeyPath<Settings, Double>,
                       _ range: ClosedRange<Double>, _ mutability: Mutability) -> PropertyDeclaration {
        PropertyDeclaration(
            name: name, nick: nick, blurb: blurb,
            kind: .double(minimum: range.lowerBound, maximum: range.upperBound, defaultValue: Settings()[keyPath: field]),
            mutability: mutability, read: { .double($0[keyPath: field]) },
            write: { settings, value in if case let .double(number) = value { settings[keyPath: field] = number } })
    }

    /// The declaration of GObject property `id`, if it is one of ours.
    static func with(id: UInt32) -> PropertyDeclaration? {
        id >= 1 && Int(id) <= all.count ? all[Int(id) - 1] : nil
    }

    static let all: [PropertyDeclaration] = [
        .enumeration("output", "Output", "What the source pad carries: auto follows the downstream caps", \.output, .ready)
            .onSet(.renegotiateSource),
        .enumeration("background", "Background", "Background of the composite output", \.background, .playing),
        .enumeration("edge-colors", "Edge colours",
                     "Composites: the colour the person gets where the matte is soft (estimated: no halo of the old "
                         + "background; original: plain blending)", \.edgeColors, .playing),
        .enumeration("alpha-mode", "Alpha mode",
                     "Composites whose alpha is below 255 (background=none, a translucent background-color): straight "
                         + "colour, as GStreamer's BGRA/RGBA, or premultiplied by alpha", \.alphaMode, .playing),
        .enumeration("gray-range", "GRAY8 range",
                     "GRAY8 output: the colour range its caps say (the values are 0-255 alpha either way): full, or limited "
                         + "for alphacombine beside a limited-range main stream such as a default I420", \.grayRange, .ready),
        .uint("background-color", "Background colour",
              "Colour under the person for background=color, as ARGB (0xAARRGGBB)", \.backgroundColor, 0...UInt32.max, .playing),
        .string("model-dir", "Model folder", "Folder with the model sets (segmenter/, matanyone2/, each with manifest.json)",
                \.modelDir, .ready, emptyMeans: ModelLocations.defaultModelDir),
        .enumeration("engine", "Engine", "Matting engine", \.engine, .ready),
        .uint("stats-interval", "Stats interval", "Post a matanyone-stats element message every N frames (0 = never)",
              \.statsInterval, 0...1_000_000, .playing),
        .string("runtime-library", "ONNX Runtime library",
                "Path of libonnxruntime.so to load (empty: the one set-up installed, then the system's)", \.runtimeLibrary, .ready),
        .uint("threads", "Threads", "Inference threads (0 = one per core)", \.threads, 0...256, .ready),
        .enumeration("execution-provider", "Execution provider", "Where ONNX Runtime runs the models", \.executionProvider, .ready),
        .uint("gpu-device", "GPU device",
              "execution-provider=cuda/tensorrt/auto: which NVIDIA GPU runs the models (CUDA's numbering, as nvidia-smi "
                  + "lists them unless CUDA_VISIBLE_DEVICES renumbers them)", \.gpuDevice, 0...63, .ready),
        .enumeration("seed", "Seed",
                     "How MatAnyone2 gets its first-frame mask (until seeded, frames pass through with alpha 255)", \.seed, .ready),
        .enumeration("seeder", "Seeder",
                     "MatAnyone2 with seed=auto: what gives the first-frame mask and what the quality watch compares "
                         + "the tracks with", \.seeder, .ready),
        .string("seed-mask", "Seed mask",
                "Image (PNG, JPEG, …; white = the person) that seeds MatAnyone2 with seed=mask; resized to the frame. "
                    + "Changed while playing, it seeds the next (re)seed", \.seedMask, .playing)
            .onSet(.loadSeedMask),
        .uint("mem-every", "Memory interval", "MatAnyone2: store a memory frame every N frames", \.memEvery, 0...1000, .ready),
        .uint("max-mem-frames", "Memory frames", "MatAnyone2: frames in working memory (the first frame plus the most recent ones)",
              \.maxMemFrames, 0...100, .ready),
        .uint("top-k", "Top k", "MatAnyone2: memory entries each pixel reads from", \.topK, 0...10_000, .ready),
        .uint("warmup", "Warm-up passes", "MatAnyone2: extra passes over the first frame when seeding", \.warmup, 0...100, .ready),
        .uint("working-size", "Working size",
              "MatAnyone2: short side of the size the model runs at, keeping the frame's aspect, multiples of 16 "
                  + "(0 = the frame's own size)", \.workingSize, 0...4096, .ready),
        .enumeration("precision", "Precision", "MatAnyone2: which model set to run (auto: bf16 where it pays, else fp32); int8, fp16 and bf16 must be made first (see the README). "
                         + "RVM: auto as for MatAnyone2 (bf16 where it pays), fp32 (exact), or bf16",
                     \.precision, .ready),
        .string("model-placement", "Model placement",
                "MatAnyone2: run named models elsewhere than the rest of the set, as MODEL=PLACEMENT,… (models: encoder, uncert, "
                    + "readout, decoder, maskencoder, memframe; placements: fp32, bf16, cpu, openvino, cuda, tensorrt), e.g. "
                    + "encoder=bf16 or decoder=fp32; empty: the set's own (the stats' model-placement says what ran)",
                \.modelPlacement, .ready),
        .uint("reset-after-gap", "Reset after gap",
              "Start the track over when upstream is silent for this many ms of stream time (0: on every DISCONT "
                  + "buffer); shorter gaps, QoS drops and time the element itself spent keep the track", \.resetAfterGap,
              0...86_400_000, .playing),
        .enumeration("mode", "Mode", "sync: each frame its own alpha; async: constant rate, inference on the newest frame",
                     \.mode, .ready),
        .uint("async-delay", "Async delay",
              "mode=async: hold frames up to this many ms so each leaves with the alpha closest to it in time "
                  + "(part of the reported latency; at least the inference time gives every inferred frame its own alpha)",
              \.asyncDelay, 0...10_000, .ready),
        .uint("async-max-frames", "Async max frames",
              "mode=async with async-delay: at most this many frames held at once (0: the frames of async-delay at the "
                  + "stream's frame rate, and four more); when full, upstream waits until the oldest leaves (as a queue with "
                  + "leaky=no; no frame is dropped)",
              \.asyncMaxFrames, 0...1000, .ready),
        .enumeration("alignment", "Alignment",
                     "mode=async: a frame that leaves with an older frame's alpha wears it carried along the picture's "
                         + "motion since then (motion: ~3–5 ms a 1080p frame on two cores), or as it is (none)",
                     \.alignment, .playing),
        .double("downsample-ratio", "Downsample ratio",
                "RVM: the scale the network works at inside (its deep guided filter gives the alpha at the frame's size); "
                    + "0 = chosen from the frame size, an internal picture of about 480 px on the long side (RVM's authors' "
                    + "advice for portraits: 0.25 for 1080p, 0.375 for 720p); full-body shots matte better at about 1.6 times "
                    + "that; otherwise 0.03125-1", \.downsampleRatio, 0...1, .ready),
        .uint("temporal-smoothing", "Temporal smoothing",
              "Segmenter: how strongly the matte of still parts of the picture is averaged over time against flicker, "
                  + "in percent (0 = off); where the picture moves the matte follows at once", \.temporalSmoothing, 0...99, .ready),
        .uint("max-people", "Maximum people",
              "MatAnyone2: people tracked at once, each with its own memory (seed=auto: the seeder's separate "
                  + "regions; seed=mask: the mask's grey levels, else its regions); the alpha is their union. "
                  + "RVM and the segmenter matte everyone in the picture",
              \.maxPeople, 1...UInt32(MatAnyone2Parameters.peopleLimit), .ready),
        .uint("watch-interval", "Watch interval",
              "MatAnyone2 with seed=auto: every N frames the segmenter checks the track; a track that disagrees "
                  + "watch-patience times in a row is re-seeded, one whose person left stops (0 = no watch; a seed mask "
                  + "may be any object, which the person segmenter cannot judge: no watch with seed=mask)",
              \.watchInterval, 0...100_000, .ready),
        .uint("watch-iou", "Watch IoU",
              "MatAnyone2: a track whose overlap (IoU, %) with the segmenter's person is below this disagrees",
              \.watchIoU, 0...100, .ready),
        .uint("watch-uncertainty", "Watch uncertainty",
              "MatAnyone2: a track whose mean uncertainty (%) over the person is above this disagrees",
              \.watchUncertainty, 0...100, .ready),
        .uint("watch-patience", "Watch patience", "MatAnyone2: disagreeing checks in a row before the watch acts",
              \.watchPatience, 1...1000, .ready),
        .uint("no-person-alpha", "Alpha without a person",
              "MatAnyone2: the alpha while nobody is tracked (255 passes the frame through, 0 shows nothing)",
              \.noPersonAlpha, 0...255, .ready),
        .string("inference-server", "Inference server",
                "MatAnyone2 on a KServe v2 inference server (Triton), as http://HOST:PORT or https://HOST:PORT; the element "
                    + "keeps seeding, the watch and compositing. Empty: the models run in this process", \.inferenceServer, .ready),
        .string("server-model", "Server model", "inference-server: the name of the MatAnyone2 step model in the server's repository",
                \.serverModel, .ready, emptyMeans: "matanyone2"),
        .uint("server-timeout", "Server timeout",
              "inference-server: the longest a request may take, in ms, its wait in the server's queue included (a seed "
                  + "runs its warm-up passes in one request); no answer in time counts as the server gone",
              \.serverTimeout, 1...600_000, .ready),
        .string("server-token-file", "Server token file",
                "inference-server: a file holding a bearer token for an authorising proxy (sent as Authorization; never printed)",
                \.serverTokenFile, .ready),
        .string("server-ca-file", "Server CA file",
                "inference-server with https: a PEM file of CA certificates to trust (empty: the system's CA store)",
                \.serverCaFile, .ready),
        .enumeration("server-shared-memory", "Server shared memory",
                     "inference-server on this host: frames and mattes cross through shared memory instead of the HTTP bodies",
                     \.serverSharedMemory, .ready),
        .enumeration("server-frame-format", "Server frame format", "inference-server: how the frame crosses the wire",
                     \.serverFrameFormat, .ready),
    ]
}
