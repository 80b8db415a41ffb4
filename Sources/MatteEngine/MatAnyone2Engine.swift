import Foundation

/// How the tracker gets its first-frame mask.
public enum SeedSource: Equatable, Sendable {
    /// The person segmenter looks at each frame until it finds a person, then seeds with its mask.
    case automatic
    /// A given mask (255 = the person), any size: resampled to the frame.
    case mask(pixels: [UInt8], width: Int, height: Int)
}

/// MatAnyone2 behind the `MattingEngine` interface: frames are resampled to the working size (the
/// input's aspect, short side `workingShortSide`), the tracker is seeded from a mask or the
/// segmenter, and its alpha is resampled back. Until seeded, the alpha is opaque (255: the frame
/// passes through) and `FrameReport.seeded` is false.
public final class MatAnyone2Engine: MattingEngine {
    public let kind = EngineKind.matanyone2
    public let modelNames = MatAnyone2Core.modelNames + ["segmenter"]
    public let directory: String
    public let parameters: MatAnyone2Parameters
    /// Short side of the working size (multiple of 16); 0 keeps the frame's size.
    public let workingShortSide: Int

    private let manifest: ModelManifest
    private let sessions: [String: Session]
    private let memoryBudget: Int
    private let segmenter: SegmenterEngine?
    private let readoutGraph: MemoryReadoutGraph?
    private var core: MatAnyone2Core?
    private var down: Resampler?
    private var up: Resampler?
    private var seedSource: SeedSource
    private var seedAlpha: [UInt8] = []

    /// Fraction of the frame the segmenter must see as person before it seeds the tracker.
    static let minimumSeedCoverage = 0.005

    public convenience init(options: EngineOptions, parameters: MatAnyone2Parameters = MatAnyone2Parameters(),
                            workingShortSide: Int = 288, seed: SeedSource = .automatic) throws {
        do {
            try self.init(unclassified: options, parameters: parameters, workingShortSide: workingShortSide, seed: seed)
        } catch {
            throw EngineError.classify(error, during: .starting)
        }
    }

    private init(unclassified options: EngineOptions, parameters: MatAnyone2Parameters,
                 workingShortSide: Int, seed: SeedSource) throws {
        try parameters.validate()
        guard workingShortSide == 0 || workingShortSide >= 16 else {
            throw EngineError.badSettings(detail: "working-size must be 0 (the frame's size) or at least 16 (got \(workingShortSide))")
        }
        directory = ModelLocations.matAnyone2Dir(modelDir: options.modelDir, precision: options.precision)
        if let maker = options.precision.maker,
           !ModelLocations.hasMatAnyone2Set(modelDir: options.modelDir, precision: options.precision) {
            let fp32 = ModelLocations.matAnyone2Dir(modelDir: options.modelDir, precision: .fp32)
            let name = options.precision.rawValue
            throw EngineError.modelMissing(
                path: directory, hint: "precision=\(name) needs the \(name) set made from the fp32 one: "
                    + ".venv/bin/python -m \(maker) --src \(fp32) --out \(directory) "
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
        let runtime = try OnnxRuntime.shared(explicitPath: options.runtimeLibrary)
        var choice = try runtime.choose(options.session.provider)
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
        providerNote = choice.fallbackReason
        self.parameters = parameters
        memoryBudget = options.memoryBudget
        // The whole step schedule built once at the smallest size: a manifest whose shapes the glue
        // cannot use fails here, when the element starts, not at negotiation.
        let smallest = try MatAnyone2Core(manifest: manifest, manifestPath: directory + "/manifest.json", sessions: sessions,
                                          width: 32, height: 32, parameters: parameters)
        // On a GPU the memory read runs there too (see MemoryReadoutGraph), on the models' provider.
        let provider = sessions[MatAnyone2Core.Model.encoder.rawValue]!.provider
        onDevice = options.dataPlacement == .device || (options.dataPlacement == .automatic && provider != .cpu)
        if onDevice {
            var config = options.session
            config.provider = provider
            readoutGraph = try MemoryReadoutGraph(runtime: runtime, keyDim: smallest.keyDim, valueDim: smallest.valueDim, config: config)
        } else {
            readoutGraph = nil
        }
        self.workingShortSide = workingShortSide
        seedSource = seed
        // The segmenter seeds automatically; without it only a mask can seed. It judges frames one
        // by one, so unsmoothed.
        var seeding = options
        seeding.temporalSmoothing = 0
        if case .automatic = seed {
            segmenter = try SegmenterEngine(options: seeding)
        } else {
            segmenter = ModelLocations.hasModelSet(modelDir: options.modelDir, engine: EngineKind.segmenter.rawValue)
                ? try? SegmenterEngine(options: seeding) : nil
        }
    }

    /// Working size for a frame: the frame's aspect, short side `workingShortSide`, both sides
    /// multiples of 16 (so 1920×1080 → 512×288 and 1080×1920 → 288×512).
    public static func workingSize(width: Int, height: Int, shortSide: Int) -> (width: Int, height: Int) {
        guard shortSide > 0 else { return (width, height) }
        let short = shortSide / 16 * 16
        if width >= height {
            let long = max(16, Int((Double(width) * Double(short) / Double(height) / 16).rounded()) * 16)
            return (long, short)
        }
        let long = max(16, Int((Double(height) * Double(short) / Double(width) / 16).rounded()) * 16)
        return (short, long)
    }

    public var provider: ExecutionProvider { sessions["encoder"]!.provider }
    public let providerNote: String?
    /// Whether data stays on the models' device: the decoder's multi-scale features in memory the
    /// runtime allocates there, the memory read as an ONNX graph run there (else Swift + BLAS).
    public let onDevice: Bool
    /// The current working size's features are in the provider's memory (tests).
    var featuresOnDevice: Bool { core?.featuresOnDevice ?? false }
    public var precision: ModelPrecision { manifest.precision }

    public func reset() {
        core?.reset()
    }

    /// Forgets the track and seeds again on the next frame, from `source` (nil: as before).
    public func reseed(_ source: SeedSource?) {
        if let source { seedSource = source }
        core?.reset()
    }

    public func replaceSeed(_ source: SeedSource) { seedSource = source }

    public var isSeeded: Bool { core?.started ?? false }

    /// Builds the core for this size and times one seed step plus one pass on a blank frame (about one
    /// ordinary frame's work, without the warm-up passes a real seed runs); then forgets it. With
    /// automatic seeding the segmenter runs once too (untimed: it is not part of an ordinary frame),
    /// so the first frames, which it looks at, do not pay its runtime's first run.
    public func warmUp(width: Int, height: Int) throws -> Double {
        try EngineError.boundary(.processing) { try timedWarmUp(width: width, height: height) }
    }

    private func timedWarmUp(width: Int, height: Int) throws -> Double {
        let black = [UInt8](repeating: 0, count: width * height * 4)
        let start = monotonicMs()
        try black.withUnsafeBufferPointer { pixels in
            let core = try prepare(for: BGRAImage(base: pixels.baseAddress!, width: width, height: height, stride: width * 4))
            core.image.fill(0)
            try core.start(seed: [Float](repeating: 0, count: core.width * core.height), warmupPasses: 0)
            core.reset()
        }
        let elapsed = monotonicMs() - start
        if case .automatic = seedSource, let segmenter {
            _ = try segmenter.warmUp(width: width, height: height)
        }
        return elapsed
    }

    /// The last frame's alpha at working size, before resampling and quantisation (for checks).
    public func workingAlpha() -> (alpha: [Float], width: Int, height: Int)? {
        guard let core, core.started else { return nil }
        var out = [Float](repeating: 0, count: core.width * core.height)
        for y in 0..<core.height {
            for x in 0..<core.width { out[y * core.width + x] = core.alpha[y * core.paddedWidth + x] }
        }
        return (out, core.width, core.height)
    }

    public func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        try EngineError.boundary(.processing) { try matteFrame(frame, into: alpha, report: &report) }
    }

    private func matteFrame(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        let start = monotonicMs()
        let core = try prepare(for: frame)
        core.clearTimings()
        let preprocessEnd: Double
        if !core.started {
            // The seed first: with automatic seeding, frames without a person are never scaled.
            guard let seed = try seedMask(for: frame, report: &report) else {
                // Not seeded yet: pass the frame through, opaque.
                let seedEnd = monotonicMs()
                for y in 0..<alpha.height { (alpha.base + y * alpha.stride).update(repeating: 255, count: alpha.width) }
                report.seeded = false
                report.memoryFrames = 0
                report.preprocessMs = seedEnd - start
                report.postprocessMs = monotonicMs() - seedEnd
                return
            }
            scaleIntoCore(frame, core)
            preprocessEnd = monotonicMs()
            try core.start(seed: seed)
            report.seedMs = monotonicMs() - preprocessEnd
        } else {
            scaleIntoCore(frame, core)
            preprocessEnd = monotonicMs()
            try core.step()
        }
        let inferenceEnd = monotonicMs()
        up!.resample(core.alpha, sourceStride: core.paddedWidth, into: alpha)
        let end = monotonicMs()
        report.preprocessMs = preprocessEnd - start
        report.inferenceMs = inferenceEnd - preprocessEnd
        report.postprocessMs = end - inferenceEnd
        report.memoryMs = core.memoryMs
        for index in core.modelMs.indices { report.modelMs[index] = core.modelMs[index] }
        report.seeded = true
        report.memoryFrames = core.memoryFrames
    }

    /// The frame, scaled to the working size, into the core's image input.
    private func scaleIntoCore(_ frame: BGRAImage, _ core: MatAnyone2Core) {
        down!.bgraToRGB(frame, into: core.imageOrigin, pixelStep: 1, rowStride: core.paddedWidth,
                        planeStride: core.imagePlaneStride)
    }

    /// The core and resamplers for this frame size (rebuilt, unseeded, when the size changes).
    private func prepare(for frame: BGRAImage) throws -> MatAnyone2Core {
        if let core, down?.sourceWidth == frame.width, down?.sourceHeight == frame.height { return core }
        let size = MatAnyone2Engine.workingSize(width: frame.width, height: frame.height, shortSide: workingShortSide)
        try checkMemory(width: size.width, height: size.height, frameWidth: frame.width, frameHeight: frame.height)
        let core = try MatAnyone2Core(manifest: manifest, manifestPath: directory + "/manifest.json", sessions: sessions,
                                      width: size.width, height: size.height, parameters: parameters,
                                      readoutGraph: readoutGraph, featuresOnDevice: onDevice)
        down = Resampler(sourceWidth: frame.width, sourceHeight: frame.height, targetWidth: size.width, targetHeight: size.height)
        up = Resampler(sourceWidth: size.width, sourceHeight: size.height, targetWidth: frame.width, targetHeight: frame.height)
        self.core = core
        return core
    }

    /// What ONNX Runtime holds per padded working pixel while the models run (activations and their
    /// workspaces), measured: peak RSS grows by ~2.7 KB per pixel from 256×144 to 512×288.
    static let runtimeBytesPerPixel = 3 << 10

    /// Memory one working size needs: the runtime's share, the engine's tensors (a few hundred floats
    /// per grid cell, counted in the runtime's share) and the memory bank. nil: beyond any machine.
    static func memoryNeeded(width: Int, height: Int, keyDim: Int, valueDim: Int, maxFrames: Int) -> Int? {
        let padded = MatAnyone2Core.paddedSize(width: width, height: height)
        return checkedSum([
            checkedProduct([padded.width, padded.height, runtimeBytesPerPixel]),
            MemoryBank.bytesNeeded(keyDim: keyDim, valueDim: valueDim,
                                   tokensPerFrame: padded.width / 16 * (padded.height / 16), maxFrames: maxFrames),
        ])
    }

    /// Refuses a working size that would not fit the memory budget, naming the largest that would.
    private func checkMemory(width: Int, height: Int, frameWidth: Int, frameHeight: Int) throws {
        // The bank stores the encoder's keys and the mask encoder's values (64 and 256 channels upstream).
        let channels = { (model: String, port: String, fallback: Int) -> Int in
            let shape = self.manifest.models[model]?.outputs.first { $0.name == port }?.shape ?? []
            return shape.count > 1 && shape[1] > 0 ? shape[1] : fallback
        }
        let (keyDim, valueDim) = (channels("encoder", "key", 64), channels("maskencoder", "mask_value", 256))
        let needed = { (w: Int, h: Int) in
            MatAnyone2Engine.memoryNeeded(width: w, height: h, keyDim: keyDim, valueDim: valueDim,
                                          maxFrames: self.parameters.maxMemFrames)
        }
        if let bytes = needed(width, height), bytes <= memoryBudget { return }
        let asked = workingShortSide == 0 ? "working-size=0 (the frame's \(frameWidth)×\(frameHeight))"
                                          : "working-size=\(workingShortSide) (\(width)×\(height))"
        let need = needed(width, height).map(MemoryBudget.describe) ?? "more than any machine has"
        var advice = "no working size fits it; lower max-mem-frames"
        for short in stride(from: min(width, height) / 16 * 16, through: 16, by: -16) {
            let size = MatAnyone2Engine.workingSize(width: frameWidth, height: frameHeight, shortSide: short)
            if let bytes = needed(size.width, size.height), bytes <= memoryBudget {
                advice = "the largest that fits is working-size=\(short) (\(size.width)×\(size.height))"
                break
            }
        }
        throw EngineError.badSettings(detail: "\(asked) needs about \(need), over this machine's budget of "
                                      + "\(MemoryBudget.describe(memoryBudget)) (3/4 of its memory); \(advice)")
    }

    /// The seed alpha at working size, or nil when there is nothing to seed with yet.
    private func seedMask(for frame: BGRAImage, report: inout FrameReport) throws -> [Float]? {
        guard let core else { return nil }
        var mask: [Float]
        switch seedSource {
        case let .mask(pixels, width, height):
            mask = MatAnyone2Engine.resample(pixels, width: width, height: height, toWidth: core.width, toHeight: core.height)
        case .automatic:
            guard let segmenter else { return nil }
            if seedAlpha.count != frame.width * frame.height {
                seedAlpha = [UInt8](repeating: 0, count: frame.width * frame.height)
            }
            var segmenterReport = FrameReport(modelCount: 1)
            try seedAlpha.withUnsafeMutableBufferPointer { plane in
                try segmenter.matte(frame, into: GrayImage(base: plane.baseAddress!, width: frame.width,
                                                           height: frame.height, stride: frame.width),
                                    report: &segmenterReport)
            }
            report.modelMs[MatAnyone2Core.modelNames.count] = segmenterReport.modelMs[0]
            let person = seedAlpha.reduce(0) { $0 + ($1 >= 128 ? 1 : 0) }
            guard Double(person) >= MatAnyone2Engine.minimumSeedCoverage * Double(seedAlpha.count) else { return nil }
            let binary = seedAlpha.map { $0 >= 128 ? UInt8(255) : 0 }
            mask = MatAnyone2Engine.resample(binary, width: frame.width, height: frame.height,
                                             toWidth: core.width, toHeight: core.height)
        }
        return SeedMask.prepare(mask, width: core.width, height: core.height,
                                dilate: parameters.seedDilate, erode: parameters.seedErode)
    }

    /// An 8-bit mask → values in [0, 1] at another size (SeedMask.prepare quantises them once).
    static func resample(_ pixels: [UInt8], width: Int, height: Int, toWidth: Int, toHeight: Int) -> [Float] {
        var source = pixels
        var floats = [Float](repeating: 0, count: toWidth * toHeight)
        let resampler = Resampler(sourceWidth: width, sourceHeight: height, targetWidth: toWidth, targetHeight: toHeight)
        source.withUnsafeMutableBufferPointer { input in
            resampler.resample(GrayImage(base: input.baseAddress!, width: width, height: height, stride: width),
                               into: &floats, destinationStride: toWidth)
        }
        return floats
    }
}
