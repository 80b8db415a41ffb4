import Foundation
import MattePixels

/// How the tracker gets its first-frame mask.
public enum SeedSource: Equatable, Sendable {
    /// The seeder (RVM where installed, else the person segmenter: `SeederChoice`) looks at each frame
    /// until it finds a person, then seeds with its mask.
    case automatic
    /// A given mask (255 = the person), any size: resampled to the frame.
    case mask(pixels: [UInt8], width: Int, height: Int)
}

/// MatAnyone2 behind the `MattingEngine` interface: frames are resampled to the working size (the
/// input's aspect, short side `workingShortSide`), the tracker is seeded from a mask or the
/// seeder (RVM or the segmenter), and its alpha is resampled back. Until seeded, the alpha is opaque (255: the frame
/// passes through) and `FrameReport.seeded` is false.
public final class MatAnyone2Engine: MattingEngine {
    public let kind = EngineKind.matanyone2
    /// The networks, then the seeder (named as it is: `segmenter` or `rvm`), whose time goes last.
    public let modelNames: [String]
    private var seederSlot: Int { modelNames.count - 1 }
    /// The model set's folder (in-process), or the inference server's address.
    public let directory: String
    public let parameters: MatAnyone2Parameters
    /// Short side of the working size (multiple of 16); 0 keeps the frame's size.
    public let workingShortSide: Int

    /// Where the networks run: this process, or an inference server (`inference-server`).
    private enum Home {
        case local(LocalModels)
        case server(StepClient)
    }
    private let home: Home
    /// What seeds automatically and what the quality watch compares the tracks with: RVM's matte, or
    /// the segmenter's mask (a per-frame look: it is reset before each).
    private let seeder: MattingEngine?
    /// The seeder's kind (when there is none, the segmenter's name still holds its time slot, at 0).
    public let seederKind: EngineKind
    /// Every person slot at the current working size (nil until the first frame).
    private var tracks: Tracks?
    private var watch: QualityWatch
    private var framesSinceWatch = 0
    /// Everyone left (the watch stopped every track): the next seed is a re-entry.
    private var everyoneLeft = false
    /// The union of several people's alphas, at working size.
    private var union: [Float] = []
    private var down: Resampler?
    private var up: Resampler?
    private var seedSource: SeedSource
    private var seedAlpha: [UInt8] = []

    /// Fraction of the frame the seeder must see as person before it seeds the tracker.
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
        if let server = options.server {
            guard options.precision == .fp32 else {
                throw EngineError.badSettings(detail: "precision=\(options.precision.rawValue) chooses the model set run in this process; "
                                              + "with inference-server the server's repository decides (leave precision=auto, or set fp32)")
            }
            guard options.placement.isEmpty else {
                throw EngineError.badSettings(detail: "model-placement places models in this process; with inference-server the "
                                              + "server runs them where its repository says: clear model-placement")
            }
            home = .server(try StepClient(options: server, parameters: parameters))
            directory = server.url
            providerNote = nil
            onDevice = false
        } else {
            let local = try LocalModels(options: options, parameters: parameters)
            home = .local(local)
            directory = local.directory
            providerNote = local.providerNote
            onDevice = local.deviceGraphs != nil
        }
        self.parameters = parameters
        watch = QualityWatch(settings: parameters.watch, tracks: parameters.maxPeople)
        self.workingShortSide = workingShortSide
        seedSource = seed
        // The seeder seeds automatically; without it only a mask can seed. It judges frames one by
        // one, so unsmoothed, and RVM at the ratio its authors advise for the frame size.
        var seeding = options
        seeding.temporalSmoothing = 0
        seeding.placement = [:]
        seeding.rvmDownsampleRatio = 0
        // (MatAnyone2's int8 and fp16 sets have no RVM counterpart: the seeder runs fp32 then.)
        seeding.precision = options.precision == .bf16 ? .bf16 : .fp32
        let kind = MatAnyone2Engine.seederKind(options.seeder, modelDir: options.modelDir)
        seederKind = kind
        modelNames = MatAnyone2Core.modelNames + [kind.rawValue]
        let make = { () throws -> MattingEngine in
            kind == .rvm ? try RVMEngine(options: seeding) : try SegmenterEngine(options: seeding)
        }
        if case .automatic = seed {
            seeder = try make()
        } else {
            seeder = ModelLocations.hasModelSet(modelDir: options.modelDir, engine: kind.rawValue) ? try? make() : nil
        }
    }

    /// Which engine seeds: RVM when asked, or with `auto` when its set is installed (its first-frame
    /// matte of test-sample2's dancer has IoU 0.956 with the hand-made mask, the segmenter's 0.741);
    /// else the segmenter.
    static func seederKind(_ choice: SeederChoice, modelDir: String) -> EngineKind {
        switch choice {
        case .segmenter: return .segmenter
        case .rvm: return .rvm
        case .auto: return ModelLocations.hasModelSet(modelDir: modelDir, engine: EngineKind.rvm.rawValue) ? .rvm : .segmenter
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

    /// In-process: the networks' provider. With an inference server: the CPU (where the element's own
    /// seeding segmenter runs; `server` says where the networks do).
    public var provider: ExecutionProvider {
        if case let .local(local) = home { return local.provider }
        return .cpu
    }
    public let providerNote: String?
    /// Whether data stays on the models' device: every tensor but the frame in memory the runtime
    /// allocates there, the glue's arithmetic and the memory read as graphs run there (else Swift + BLAS).
    public let onDevice: Bool
    public var dataOnDevice: Bool { onDevice }
    /// The inference server the networks run on (its address), or nil in-process.
    public var server: String? {
        if case let .server(client) = home { return client.address }
        return nil
    }
    private var local: LocalModels? {
        if case let .local(local) = home { return local }
        return nil
    }
    private var localTracks: LocalTracks? { tracks as? LocalTracks }
    /// The current working size's tensors are in the provider's memory (tests).
    var tensorsOnDevice: Bool { localTracks?.cores[0].onDevice ?? false }
    /// Each model's provider (tests: a bf16 set runs some on OpenVINO, the rest on the CPU provider).
    var providers: [String: ExecutionProvider] { local?.sessions.mapValues(\.provider) ?? [:] }
    public var placement: String { local?.placement ?? "" }
    /// Bytes the glue moved between host and device so far (tests; 0 on the host path).
    var glueBytesAcrossTheBus: Int { local?.deviceGraphs?.bytesAcrossTheBus ?? 0 }
    /// The host tensors the models of the current working size read or write (tests).
    var hostTensorsBoundToModels: Set<String> {
        localTracks?.cores.reduce(into: Set()) { $0.formUnion($1.hostTensorsBoundToModels) } ?? []
    }
    public var precision: ModelPrecision { local?.manifest.precision ?? .fp32 }
    /// The set's licence in-process; with a server, the weights are the server's (its repository says).
    public var license: String { local.map { $0.manifest.license ?? "unknown" } ?? "the inference server's" }

    public func reset() {
        tracks?.reset()
        watch = QualityWatch(settings: parameters.watch, tracks: parameters.maxPeople)
        framesSinceWatch = 0
        everyoneLeft = false
    }

    /// Forgets the track and seeds again on the next frame, from `source` (nil: as before).
    public func reseed(_ source: SeedSource?) {
        if let source { seedSource = source }
        reset()
    }

    public func replaceSeed(_ source: SeedSource) { seedSource = source }

    public var isSeeded: Bool { tracks?.isTrackingAnyone ?? false }

    /// Builds the tracks for this size and times one seed step plus one pass on a blank frame for every
    /// person slot (about one ordinary frame's work with max-people tracked: the latency a live
    /// pipeline is told must hold when everyone is there; without the warm-up passes a real seed
    /// runs); then forgets them. With
    /// automatic seeding the segmenter runs once too (untimed: it is not part of an ordinary frame),
    /// so the first frames, which it looks at, do not pay its runtime's first run.
    public func warmUp(width: Int, height: Int) throws -> Double {
        try EngineError.boundary(.processing) {
            do {
                return try timedWarmUp(width: width, height: height)
            } catch is ServerFault {
                // (A server gone since the start, or not there yet in a live chain: the frames say so,
                // once; their cost is measured as they come.)
                tracks?.reset()
                return 0
            }
        }
    }

    private func timedWarmUp(width: Int, height: Int) throws -> Double {
        let black = [UInt8](repeating: 0, count: width * height * 4)
        let start = monotonicMs()
        try black.withUnsafeBufferPointer { pixels in
            let tracks = try prepare(for: BGRAImage(base: pixels.baseAddress!, width: width, height: height, stride: width * 4))
            tracks.reset()  // (the warm-up starts every slot afresh; on a server, the stream too)
            tracks.loadBlack()
            let blank = [Float](repeating: 0, count: tracks.width * tracks.height)
            try tracks.run((0..<tracks.slots).map { .start($0, seed: blank, warmupPasses: 0) })
            tracks.reset()
        }
        let elapsed = monotonicMs() - start
        if case .automatic = seedSource, let seeder {
            _ = try seeder.warmUp(width: width, height: height)
        }
        return elapsed
    }

    /// The last frame's alpha at working size, before resampling and quantisation (for checks): the
    /// union of everyone tracked, or one person's (1-based) own.
    public func workingAlpha(person: Int? = nil) -> (alpha: [Float], width: Int, height: Int)? {
        guard let tracks else { return nil }
        let tracked = (0..<tracks.slots).filter { tracks.isTracking($0) && (person == nil || $0 == person! - 1) }
        guard !tracked.isEmpty else { return nil }
        let (width, height, stride) = (tracks.width, tracks.height, tracks.alphaStride)
        var out = [Float](repeating: 0, count: width * height)
        for slot in tracked {
            let alpha = tracks.alpha(slot)
            for y in 0..<height {
                for x in 0..<width { out[y * width + x] = max(out[y * width + x], alpha[y * stride + x]) }
            }
        }
        return (out, width, height)
    }

    public func matte(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        try EngineError.boundary(.processing) { try matteFrame(frame, into: alpha, report: &report) }
    }

    private func matteFrame(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        guard case let .server(client) = home else { return try matteTracked(frame, into: alpha, report: &report) }
        defer {
            report.server = client.takeTiming()
            report.notices += client.takeNotices()
        }
        do {
            try matteTracked(frame, into: alpha, report: &report)
        } catch ServerFault.stateLost(let detail) {
            // The server restarted (or forgot an idle stream): the track starts over on this frame.
            report.notices.append(.serverForgotStream(server: client.address, detail: detail))
            reset()
            do {
                try matteTracked(frame, into: alpha, report: &report)
            } catch let fault as ServerFault {
                rideOut(fault, alpha, report: &report)
            }
        } catch let fault as ServerFault {
            rideOut(fault, alpha, report: &report)
        }
    }

    /// A frame the server did not answer: without a matte (the client said so once, and retries with
    /// backoff). When the request may have run there, the tracks start over once it answers.
    private func rideOut(_ fault: ServerFault, _ alpha: GrayImage, report: inout FrameReport) {
        if case .unreachable = fault {} else { reset() }
        withoutPerson(alpha, report: &report)
    }

    /// A frame without anyone tracked: `no-person-alpha` everywhere.
    private func withoutPerson(_ alpha: GrayImage, report: inout FrameReport) {
        fill(alpha, with: parameters.noPersonAlpha)
        report.seeded = false
        report.people = 0
        report.memoryFrames = 0
    }

    private func matteTracked(_ frame: BGRAImage, into alpha: GrayImage, report: inout FrameReport) throws {
        let start = monotonicMs()
        let tracks = try prepare(for: frame)
        tracks.clearTimings()
        if report.personMs.count != tracks.slots { report.personMs = [Double](repeating: 0, count: tracks.slots) }
        let preprocessEnd: Double
        if !isSeeded {
            // The seed first: with automatic seeding, frames without a person are never scaled.
            let seeds = try seedMasks(for: frame, report: &report)
            guard !seeds.isEmpty else {
                let seedEnd = monotonicMs()
                withoutPerson(alpha, report: &report)
                report.preprocessMs = seedEnd - start
                report.postprocessMs = monotonicMs() - seedEnd
                return
            }
            tracks.load(frame, through: down!)
            preprocessEnd = monotonicMs()
            try tracks.run(seeds.enumerated().map { .start($0, seed: $1, warmupPasses: nil) })
            for slot in seeds.indices {
                watch.forget(track: slot)
                if everyoneLeft { report.events.append(TrackEvent(person: slot + 1, reason: .reentry, iou: -1, uncertainty: -1)) }
            }
            everyoneLeft = false
            framesSinceWatch = 0
            report.seedMs = monotonicMs() - preprocessEnd
        } else {
            tracks.load(frame, through: down!)
            preprocessEnd = monotonicMs()
            try tracks.run((0..<tracks.slots).filter { tracks.isTracking($0) }.map { .step($0) })
            framesSinceWatch += 1
            if parameters.watch.interval > 0, framesSinceWatch >= parameters.watch.interval, seeder != nil {
                framesSinceWatch = 0
                try runWatch(frame, tracks: tracks, report: &report)
            }
        }
        let inferenceEnd = monotonicMs()
        let tracked = (0..<tracks.slots).filter { tracks.isTracking($0) }
        if tracked.isEmpty {
            fill(alpha, with: parameters.noPersonAlpha)
        } else if tracked.count == 1 {
            up!.resample(tracks.alpha(tracked[0]), sourceStride: tracks.alphaStride, into: alpha)
        } else {
            // Several people: the union (max) of their alphas.
            let (width, height, stride) = (tracks.width, tracks.height, tracks.alphaStride)
            if union.count != width * height { union = [Float](repeating: 0, count: width * height) }
            let alphas = tracked.map { tracks.alpha($0) }
            for y in 0..<height {
                for x in 0..<width {
                    var value: Float = 0
                    for person in alphas { value = max(value, person[y * stride + x]) }
                    union[y * width + x] = value
                }
            }
            union.withUnsafeBufferPointer { up!.resample($0.baseAddress!, sourceStride: width, into: alpha) }
        }
        let end = monotonicMs()
        report.preprocessMs = preprocessEnd - start
        report.inferenceMs = inferenceEnd - preprocessEnd
        report.postprocessMs = end - inferenceEnd
        report.memoryMs = tracks.memoryMs
        for (index, ms) in tracks.modelMs.enumerated() { report.modelMs[index] = ms }
        for slot in 0..<tracks.slots { report.personMs[slot] = tracks.personMs(slot) }
        report.seeded = !tracked.isEmpty
        report.people = tracked.count
        report.memoryFrames = tracked.map { tracks.memoryFrames($0) }.max() ?? 0
    }

    private func fill(_ alpha: GrayImage, with value: UInt8) {
        for y in 0..<alpha.height { (alpha.base + y * alpha.stride).update(repeating: value, count: alpha.width) }
    }

    /// The quality watch: the seeder looks at this frame; each track is compared with the person it
    /// overlaps most (IoU of the masks, and MatAnyone2's own uncertainty there), and re-seeded from
    /// that person when they disagree for `patience` checks; a track that overlaps nobody for that
    /// long stops (its person left); someone the tracks do not cover gets a free slot.
    private func runWatch(_ frame: BGRAImage, tracks: Tracks, report: inout FrameReport) throws {
        let people = try seederPeople(frame, report: &report)
        let masks = people.map(\.mask)
        var claimed = Set<Int>()
        var worstIoU: Double?, worstUncertainty: Double?
        // What the watch decides, run as one batch at the end (on an inference server: one request).
        var operations: [TrackOperation] = []
        var tracking = (0..<tracks.slots).map { tracks.isTracking($0) }
        for slot in 0..<tracks.slots where tracking[slot] {
            let track = tracks.personMask(slot)
            var best: (index: Int, iou: Double)?
            for (index, person) in masks.enumerated() where !claimed.contains(index) {
                let iou = PersonMasks.intersectionOverUnion(track, person)
                if best == nil || iou > best!.iou { best = (index, iou) }
            }
            // With one person tracked, whoever the segmenter sees is that person (a track that slid
            // off them entirely is drift); with several, a track overlapping nobody has lost its person.
            let matched = best.flatMap { parameters.maxPeople == 1 || $0.iou > 0.02 ? $0 : nil }
            if let matched { claimed.insert(matched.index) }
            let uncertainty = try tracks.meanUncertainty(slot, over: track)
            worstIoU = min(worstIoU ?? 1, matched?.iou ?? 0)
            worstUncertainty = max(worstUncertainty ?? 0, uncertainty)
            switch watch.judge(track: slot, iou: matched?.iou, uncertainty: matched == nil ? nil : uncertainty) {
            case .keep:
                break
            case .reseed:
                operations.append(.start(slot, seed: people[matched!.index].seed, warmupPasses: nil))
                report.events.append(TrackEvent(person: slot + 1, reason: .drift, iou: matched!.iou, uncertainty: uncertainty))
            case .stop:
                operations.append(.stop(slot))
                tracking[slot] = false
                watch.forget(track: slot)
                report.events.append(TrackEvent(person: slot + 1, reason: .personLeft, iou: matched?.iou ?? 0, uncertainty: uncertainty))
            }
        }
        for (index, person) in people.enumerated() where !claimed.contains(index) {
            guard tracking.contains(true), let free = tracking.firstIndex(of: false) else { break }
            operations.append(.start(free, seed: person.seed, warmupPasses: nil))
            tracking[free] = true
            watch.forget(track: free)
            report.events.append(TrackEvent(person: free + 1, reason: .newPerson, iou: -1, uncertainty: -1))
        }
        if !operations.isEmpty {
            let seedStart = monotonicMs()
            try tracks.run(operations)
            if operations.contains(where: { if case .start = $0 { return true } else { return false } }) {
                report.seedMs += monotonicMs() - seedStart
            }
        }
        if !isSeeded { everyoneLeft = true }
        if let worstIoU { report.watchIoU = worstIoU }
        if let worstUncertainty { report.watchUncertainty = worstUncertainty }
    }

    /// The tracks and resamplers for this frame size (rebuilt, unseeded, when the size changes).
    private func prepare(for frame: BGRAImage) throws -> Tracks {
        if let tracks, down?.sourceWidth == frame.width, down?.sourceHeight == frame.height { return tracks }
        let size = MatAnyone2Engine.workingSize(width: frame.width, height: frame.height, shortSide: workingShortSide)
        let built: Tracks
        switch home {
        case let .local(local):
            try checkMemory(local, width: size.width, height: size.height, frameWidth: frame.width, frameHeight: frame.height)
            built = try local.tracks(width: size.width, height: size.height, parameters: parameters)
        case let .server(client):
            built = try client.tracks(width: size.width, height: size.height, slots: parameters.maxPeople)
        }
        down = Resampler(sourceWidth: frame.width, sourceHeight: frame.height, targetWidth: size.width, targetHeight: size.height)
        up = Resampler(sourceWidth: size.width, sourceHeight: size.height, targetWidth: frame.width, targetHeight: frame.height)
        tracks = built
        reset()
        return built
    }

    /// What ONNX Runtime holds per padded working pixel while the models run (activations and their
    /// workspaces), measured: peak RSS grows by ~2.7 KB per pixel from 256×144 to 512×288.
    static let runtimeBytesPerPixel = 3 << 10

    /// Memory one working size needs: the runtime's share, the engine's tensors (a few hundred floats
    /// per grid cell, counted in the runtime's share) and the memory bank. nil: beyond any machine.
    static func memoryNeeded(width: Int, height: Int, keyDim: Int, valueDim: Int, maxFrames: Int, people: Int = 1) -> Int? {
        let padded = MatAnyone2Core.paddedSize(width: width, height: height)
        let tokens = padded.width / 16 * (padded.height / 16)
        return checkedSum([
            checkedProduct([padded.width, padded.height, runtimeBytesPerPixel]),
            // Each person: a bank, and its own stride-16 state (sensory, values, readouts: ~3000
            // floats a grid cell with the two full-size alphas).
            MemoryBank.bytesNeeded(keyDim: keyDim, valueDim: valueDim, tokensPerFrame: tokens, maxFrames: maxFrames)
                .flatMap { checkedProduct([$0, people]) },
            checkedProduct([people - 1, tokens, 12 << 10]),
        ])
    }

    /// Refuses a working size that would not fit the memory budget, naming the largest that would.
    private func checkMemory(_ local: LocalModels, width: Int, height: Int, frameWidth: Int, frameHeight: Int) throws {
        // The bank stores the encoder's keys and the mask encoder's values (64 and 256 channels upstream).
        let channels = { (model: String, port: String, fallback: Int) -> Int in
            let shape = local.manifest.models[model]?.outputs.first { $0.name == port }?.shape ?? []
            return shape.count > 1 && shape[1] > 0 ? shape[1] : fallback
        }
        let (keyDim, valueDim) = (channels("encoder", "key", 64), channels("maskencoder", "mask_value", 256))
        let needed = { (w: Int, h: Int) in
            MatAnyone2Engine.memoryNeeded(width: w, height: h, keyDim: keyDim, valueDim: valueDim,
                                          maxFrames: self.parameters.maxMemFrames, people: self.parameters.maxPeople)
        }
        if let bytes = needed(width, height), bytes <= local.memoryBudget { return }
        let asked = workingShortSide == 0 ? "working-size=0 (the frame's \(frameWidth)×\(frameHeight))"
                                          : "working-size=\(workingShortSide) (\(width)×\(height))"
        let need = needed(width, height).map(MemoryBudget.describe) ?? "more than any machine has"
        var advice = "no working size fits it; lower max-mem-frames"
        for short in stride(from: min(width, height) / 16 * 16, through: 16, by: -16) {
            let size = MatAnyone2Engine.workingSize(width: frameWidth, height: frameHeight, shortSide: short)
            if let bytes = needed(size.width, size.height), bytes <= local.memoryBudget {
                advice = "the largest that fits is working-size=\(short) (\(size.width)×\(size.height))"
                break
            }
        }
        throw EngineError.badSettings(detail: "\(asked) needs about \(need), over this machine's budget of "
                                      + "\(MemoryBudget.describe(local.memoryBudget)) (3/4 of its memory); \(advice)")
    }

    /// The seeds at working size, one per person (at most max-people), or none when there is nothing
    /// to seed with yet. With one person, the whole mask is the person (everyone in it, as one track);
    /// with several, a mask's grey levels label people (else its separate regions are the people), and
    /// the segmenter's separate regions are.
    private func seedMasks(for frame: BGRAImage, report: inout FrameReport) throws -> [[Float]] {
        guard let core = tracks else { return [] }
        switch seedSource {
        case let .mask(pixels, width, height):
            if parameters.maxPeople == 1 {
                let mask = MatAnyone2Engine.resample(pixels, width: width, height: height, toWidth: core.width, toHeight: core.height)
                return [SeedMask.prepare(mask, width: core.width, height: core.height,
                                         dilate: parameters.seedDilate, erode: parameters.seedErode)]
            }
            let minimumArea = Int(MatAnyone2Engine.minimumSeedCoverage * Double(width * height))
            let labels = PersonMasks.labels(in: pixels, minimumArea: minimumArea)
            if labels.count >= 2 {
                return labels.prefix(parameters.maxPeople).map { label in
                    let person = pixels.map { $0 == label ? UInt8(255) : 0 }
                    let mask = MatAnyone2Engine.resample(person, width: width, height: height, toWidth: core.width, toHeight: core.height)
                    return SeedMask.prepare(mask, width: core.width, height: core.height,
                                            dilate: parameters.seedDilate, erode: parameters.seedErode)
                }
            }
            let binary = pixels.map { $0 >= 128 ? UInt8(255) : 0 }
            return people(in: binary, width: width, height: height).map(\.seed)
        case .automatic:
            return try seederPeople(frame, report: &report).map(\.seed)
        }
    }

    /// The people the seeder sees in `frame`, as masks at working size (largest first; one mask
    /// holding everyone with max-people=1); none when it sees less than `minimumSeedCoverage`.
    private func seederPeople(_ frame: BGRAImage, report: inout FrameReport) throws -> [Person] {
        guard let seeder else { return [] }
        if seedAlpha.count != frame.width * frame.height {
            seedAlpha = [UInt8](repeating: 0, count: frame.width * frame.height)
        }
        var seederReport = FrameReport(modelCount: 1)
        // Each look stands alone: RVM's states start over (its first pass from zeros is already its
        // best on a new picture: IoU 0.956, then 0.956-0.957 over five more passes of the same frame).
        seeder.reset()
        try seedAlpha.withUnsafeMutableBufferPointer { plane in
            try seeder.matte(frame, into: GrayImage(base: plane.baseAddress!, width: frame.width,
                                                    height: frame.height, stride: frame.width),
                             report: &seederReport)
        }
        report.modelMs[seederSlot] += seederReport.modelMs[0]
        let person = seedAlpha.reduce(0) { $0 + ($1 >= 128 ? 1 : 0) }
        guard Double(person) >= MatAnyone2Engine.minimumSeedCoverage * Double(seedAlpha.count) else { return [] }
        let binary = seedAlpha.map { $0 >= 128 ? UInt8(255) : 0 }
        return people(in: binary, width: frame.width, height: frame.height)
    }

    /// One person at working size: the mask the watch compares with, the seed a track starts from.
    private struct Person {
        let mask: [Bool]
        let seed: [Float]
    }

    /// A binary 8-bit mask's people at working size: the whole mask with max-people=1 (seeded from
    /// its resampled soft edge, as upstream's script seeds), else its separate regions of at least
    /// `minimumSeedCoverage` of the frame, largest first.
    private func people(in binary: [UInt8], width: Int, height: Int) -> [Person] {
        guard let core = tracks else { return [] }
        let scaled = MatAnyone2Engine.resample(binary, width: width, height: height, toWidth: core.width, toHeight: core.height)
        let mask = scaled.map { $0 >= 0.5 }
        let prepare = { (values: [Float]) in
            SeedMask.prepare(values, width: core.width, height: core.height,
                             dilate: self.parameters.seedDilate, erode: self.parameters.seedErode)
        }
        guard parameters.maxPeople > 1 else { return [Person(mask: mask, seed: prepare(scaled))] }
        let minimumArea = max(1, Int(MatAnyone2Engine.minimumSeedCoverage * Double(core.width * core.height)))
        return PersonMasks.components(of: mask, width: core.width, height: core.height, minimumArea: minimumArea)
            .prefix(parameters.maxPeople)
            .map { Person(mask: $0, seed: prepare($0.map { $0 ? 1 : 0 })) }
    }

    /// An 8-bit mask → values in [0, 1] at another size (SeedMask.prepare quantises them once).
    static func resample(_ pixels: [UInt8], width: Int, height: Int, toWidth: Int, toHeight: Int) -> [Float] {
        var floats = [Float](repeating: 0, count: toWidth * toHeight)
        let resampler = Resampler(sourceWidth: width, sourceHeight: height, targetWidth: toWidth, targetHeight: toHeight)
        GrayView.of(pixels, width: width, height: height) { resampler.resample($0, into: &floats, destinationStride: toWidth) }
        return floats
    }
}
