import Foundation
import MattePixels

/// The engines the element can run.
public enum EngineKind: String, CaseIterable, Sendable {
    /// Per-frame person segmentation (MediaPipe selfie segmentation): the embedded default.
    case segmenter
    /// First-frame-seeded, memory-based video matting.
    case matanyone2
    /// Robust Video Matting: a trained recurrent video-matting model, no seed needed.
    case rvm
}

/// Which engine a user asks for; `auto` is resolved by `makeEngine`.
/// (A GEnum's values are the cases' positions: a new case goes last.)
public enum EngineChoice: String, CaseIterable, Sendable {
    case auto, segmenter, matanyone2, rvm
}

/// What seeds MatAnyone2 and feeds its quality watch (seed=auto): RVM's matte or the segmenter's mask.
public enum SeederChoice: String, CaseIterable, Sendable {
    case auto, segmenter, rvm
}

/// What `auto` runs with these options: MatAnyone2 when an inference server is named or a MatAnyone2
/// set is installed, else RVM when its set is, else the segmenter. Either precision's MatAnyone2 set
/// counts, so that with precision=int8 and only the fp32 set the user gets the error that says how to
/// make the int8 set rather than a silent switch.
public func resolveEngine(_ choice: EngineChoice, options: EngineOptions) -> EngineKind {
    switch choice {
    case .segmenter: return .segmenter
    case .matanyone2: return .matanyone2
    case .rvm: return .rvm
    case .auto:
        // (An inference server serves MatAnyone2 whatever is installed here.)
        if options.server != nil
            || ModelLocations.hasMatAnyone2Set(modelDir: options.modelDir, precision: options.precision)
            || ModelLocations.hasMatAnyone2Set(modelDir: options.modelDir, precision: .fp32) {
            return .matanyone2
        }
        return ModelLocations.hasModelSet(modelDir: options.modelDir, engine: EngineKind.rvm.rawValue) ? .rvm : .segmenter
    }
}

/// The engine for `choice` (`auto` as `resolveEngine` decides).
public func makeEngine(_ choice: EngineChoice, options: EngineOptions, parameters: MatAnyone2Parameters,
                       workingShortSide: Int, seed: () throws -> SeedSource) throws -> MattingEngine {
    let kind = resolveEngine(choice, options: options)
    if kind != .matanyone2 {
        guard options.placement.isEmpty else {
            throw EngineError.badSettings(detail: "model-placement places MatAnyone2's models, and the engine is "
                                          + (kind == .segmenter ? "the segmenter" : "RVM")
                                          + (choice == .auto ? " (engine=auto found no MatAnyone2 set in \(options.modelDir))" : "")
                                          + ": clear model-placement, or run engine=matanyone2")
        }
    }
    switch kind {
    case .segmenter: return try SegmenterEngine(options: options)
    case .rvm: return try RVMEngine(options: options)
    case .matanyone2:
        return try MatAnyone2Engine(options: options, parameters: parameters, workingShortSide: workingShortSide, seed: try seed())
    }
}

/// Where MatAnyone2 keeps its data between models: on the models' device (a GPU's memory, with the
/// memory read as an ONNX graph there) or in host memory (the memory read in Swift with BLAS).
public enum DataPlacement: String, Sendable {
    /// On the device when the models run on an NVIDIA GPU (CUDA, TensorRT), else in host memory.
    case automatic
    /// Host memory, the memory read in Swift.
    case host
    /// The provider's memory (on the CPU provider too: the tests compare the two paths there).
    case device
}

/// What an engine needs to start: where the models and the runtime are, and how to run sessions.
public struct EngineOptions: Equatable, Sendable {
    public var modelDir: String
    public var runtimeLibrary: String
    public var session: SessionConfig
    /// Which MatAnyone2 set to load (the segmenter is fp32 only).
    public var precision: ModelPrecision
    /// Bytes one working size may take (MatAnyone2): larger sizes are refused with the largest that fits.
    public var memoryBudget: Int
    /// Segmenter: motion-adaptive temporal smoothing, 0 (off) … 1 (see TemporalFilter).
    public var temporalSmoothing: Double = 0
    /// RVM: the network's downsample ratio; 0 chooses it from the frame size (`RVMEngine.automaticRatio`).
    public var rvmDownsampleRatio: Double = 0
    /// MatAnyone2: what seeds it (auto: RVM where installed, else the segmenter).
    public var seeder = SeederChoice.auto
    /// MatAnyone2: where data stays between models (automatic: on the GPU when the models run there).
    public var dataPlacement = DataPlacement.automatic
    /// The CPU precision=bf16 is decided on (this machine's; tests hand in others).
    public var cpuFeatures = CpuFeatures.current
    /// MatAnyone2's networks on an inference server instead of in this process (nil: here).
    public var server: ServerOptions?
    /// MatAnyone2: models run elsewhere than the rest of the set (`ModelPlacement.parse`); empty: the set's own.
    public var placement: [String: ModelPlacement] = [:]
    public init(modelDir: String = ModelLocations.defaultModelDir, runtimeLibrary: String = "",
                session: SessionConfig = SessionConfig(), precision: ModelPrecision = .fp32,
                memoryBudget: Int = MemoryBudget.default) {
        self.modelDir = modelDir
        self.runtimeLibrary = runtimeLibrary
        self.session = session
        self.precision = precision
        self.memoryBudget = memoryBudget
    }
}

/// Timing and state of one processed frame. Reused from frame to frame (no allocation per frame).
public struct FrameReport {
    public var preprocessMs = 0.0
    public var inferenceMs = 0.0
    public var postprocessMs = 0.0
    /// Affinity, top-k and readout (MatAnyone2 only).
    public var memoryMs = 0.0
    /// One entry per `MattingEngine.modelNames`; 0 for models that did not run on this frame.
    public var modelMs: [Double]
    public var seeded = true
    public var memoryFrames = 0
    /// Time spent seeding (first-frame warm-up passes), reported once on the frame that seeded.
    public var seedMs = 0.0
    /// People tracked after this frame (MatAnyone2), and each slot's own time (its models and memory
    /// read; the shared encoder is not in it); 0 for free slots.
    public var people = 0
    public var personMs: [Double] = []
    /// The quality watch's last IoU between the tracks and the segmenter (the worst track), and the
    /// uncertainty it saw; -1 until it has looked.
    public var watchIoU = -1.0
    public var watchUncertainty = -1.0
    /// Tracks (re)started or stopped on this frame.
    public var events: [TrackEvent] = []
    /// What the engine has to say about its surroundings since the last frame (once each).
    public var notices: [EngineNotice] = []
    /// The inference server's share of this frame (nil in-process).
    public var server: ServerTiming?
    /// RVM: the downsample ratio this frame ran at (0 for the other engines).
    public var downsampleRatio = 0.0

    public init(modelCount: Int) { modelMs = [Double](repeating: 0, count: modelCount) }

    public mutating func clear() {
        preprocessMs = 0
        inferenceMs = 0
        postprocessMs = 0
        memoryMs = 0
        seedMs = 0
        for index in modelMs.indices { modelMs[index] = 0 }
        for index in personMs.indices { personMs[index] = 0 }
        events.removeAll(keepingCapacity: true)
        notices.removeAll(keepingCapacity: true)
        server = nil
        downsampleRatio = 0
    }
}

/// A matting backend: BGRA frame in, alpha plane of the same size out. Never sees GStreamer.
public protocol MattingEngine: AnyObject {
    var kind: EngineKind { get }
    /// The precision of the models it runs.
    var precision: ModelPrecision { get }
    /// Names of the models whose times `FrameReport.modelMs` carries, in that order.
    var modelNames: [String] { get }
    /// Where the models run (`auto` resolved).
    var provider: ExecutionProvider { get }
    /// Why execution-provider=auto runs on the CPU (nil when it does not), for one warning.
    var providerNote: String? { get }
    /// Whether the data between models stays in the provider's memory (on a GPU: only the frame goes
    /// up and the alpha comes down).
    var dataOnDevice: Bool { get }
    /// The inference server the models run on (its address), nil when they run in this process.
    var server: String? { get }
    /// Where each model runs, `name=place` in the engine's order (place: bf16, or the provider in
    /// fp32); empty for a single model or a server.
    var placement: String { get }
    /// The licence of the weights it runs, as its set's manifest names it (stats, gst-inspect's engine list).
    var license: String { get }
    /// Forgets all temporal state (a new stream, a seek, new caps).
    func reset()
    /// Computes the alpha of `frame` into `alpha` (same width and height).
    func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws
    /// Forgets the track and seeds again on the next frame, from `source` (nil: as configured).
    func reseed(_ source: SeedSource?)
    /// Seeds from `source` from the next (re)seed on, without interrupting the current track.
    func replaceSeed(_ source: SeedSource)
    /// Prepares for frames of this size (allocations, the runtime's first run) and returns what one
    /// frame costs in ms; leaves no temporal state behind.
    func warmUp(width: Int, height: Int) throws -> Double
}

extension MattingEngine {
    public var precision: ModelPrecision { .fp32 }
    public var dataOnDevice: Bool { false }
    public var server: String? { nil }
    public var placement: String { "" }
    public var license: String { "unknown" }

    /// Stateless engines have nothing to seed.
    public func reseed(_ source: SeedSource?) {}
    public func replaceSeed(_ source: SeedSource) {}

    /// One frame of black, timed.
    public func warmUp(width: Int, height: Int) throws -> Double {
        reset()
        let black = [UInt8](repeating: 0, count: width * height * 4)
        var alpha = [UInt8](repeating: 0, count: width * height)
        var report = FrameReport(modelCount: modelNames.count)
        let start = monotonicMs()
        try black.withUnsafeBufferPointer { pixels in
            try alpha.withUnsafeMutableBufferPointer { plane in
                try matte(BGRAImage(base: pixels.baseAddress!, width: width, height: height, stride: width * 4),
                          into: GrayImage(base: plane.baseAddress!, width: width, height: height, stride: width),
                          report: &report)
            }
        }
        let elapsed = monotonicMs() - start
        reset()
        return elapsed
    }
}

/// Milliseconds since an arbitrary origin, monotonic.
@inline(__always)
public func monotonicMs() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) * 1000 + Double(now.tv_nsec) / 1_000_000
}
