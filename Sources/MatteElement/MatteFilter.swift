import CGStreamer
import Foundation
import MatteEngine
import MattePixels

/// What the LATENCY query reads from the query thread while frames run: kept apart from the stream
/// state so that a query never waits for a frame in progress.
struct LatencyState {
    var tracker = LatencyTracker()
    var warmUpMs = 0.0
    /// mode=async: frames are held this long on purpose, on top of what producing one costs.
    var heldMs = 0.0
}

/// A bus message to post once the path lock is released: a synchronous bus handler may call back
/// into the element (a LATENCY query, a state change) from this very thread.
enum Post {
    /// (Errors keep where they were found: the bus message names that file, function and line.)
    case error(Error, file: String = #fileID, function: String = #function, line: Int = #line)
    case latency
    case stats(UnsafeMutablePointer<GstStructure>)
    /// A track (re)started or stopped (`matanyone-reseeded`).
    case trackEvent(TrackEvent, pts: GstClockTime)
    /// What the engine says of its surroundings (the inference server lost or back).
    case notice(EngineNotice)
}

/// A serialized event on the sink pad, as the element reads it (parsed in Trampolines.swift).
enum SinkEvent {
    case flushStart, flushStop, endOfStream, caps, streamStart
    case segment(GstSegment)
    /// `matanyone-reseed`, with its optional `mask` path (out of band or serialized).
    case reseed(maskPath: String?, serialized: Bool)
    /// Any other event; a serialized one keeps its place after the frames before it.
    case other(serialized: Bool)
}

/// An event on the source pad (from downstream), as the element reads it.
enum SourceEvent {
    /// The latency the pipeline configured its sinks with (ns).
    case latency(UInt64)
    case qos
    case reseed(maskPath: String?)
    case other
}

extension GstVideoInfo {
    /// Frames a second (0 for a variable or unknown rate).
    var framesPerSecond: Double { fps_d > 0 ? Double(fps_n) / Double(fps_d) : 0 }
}

extension GstSegment {
    /// Whether two segments describe the same timeline: `position`, which the base class advances
    /// with every buffer, and `duration` do not count.
    func sameTimeline(as other: GstSegment) -> Bool {
        format == other.format && flags == other.flags && rate == other.rate && applied_rate == other.applied_rate
            && base == other.base && offset == other.offset && start == other.start && stop == other.stop && time == other.time
    }
}

/// What predictive QoS needs to know of the pipeline: the latency it configured its sinks with
/// (the LATENCY event on its way upstream, ns), whether it is live (the LATENCY query), and
/// whether a sink downstream synchronises and sends QoS events (only then is anything "late").
struct LiveTiming {
    var configuredLatency: UInt64?
    var live = false
    var downstreamQoS = false
    var lastAdmitted: UInt64?
    /// Since when (running time) frames have arrived far behind their time, and whether that
    /// was said (see `watchBacklog`).
    var behindSince: UInt64?
    var warnedBehind = false
}

/// Reseeds and seeds asked for and not yet applied to a frame.
struct ReseedRequests {
    /// A reseed asked for by a signal or event and not yet applied (nil: none).
    var pending: PendingReseed?
    /// A seed mask set while playing: used from the next (re)seed on.
    var seed: SeedSource?
    /// Reseed requests made so far (see `requestReseed`); `stop` counts as one, so that a mask still
    /// loading then is not used by the next run.
    var count = 0
}

/// What the element's threads share besides the settings and the frame path: small facts read and
/// written in passing, never while another lock is held (see ARCHITECTURE.md, "Locks, threads").
struct Control {
    var latency = LatencyState()
    var live = LiveTiming()
    var reseed = ReseedRequests()
    /// Caps whose set-up failed and was reported: base transform retries them on every buffer, and
    /// the same error must reach the bus once, not once a buffer.
    var refusedCaps: String?
    /// How a stream's engine is made: nil for the production maker, else what a test injected
    /// (`injectEngineMaker`) before the element started.
    var engineMaker: EngineMaker?
    /// The frame path of the running stream: made in `start`, dropped in `stop`. Its state is behind
    /// its own lock (the path lock): read the path here, release, then call it.
    var path: FramePath?
}

/// Makes a stream's engine from the settings (`MatteFilter.makeEngine`, or what a test injects).
typealias EngineMaker = (Settings) throws -> MattingEngine

/// The element's behaviour. One instance per `GstMatAnyone`, owned by it (see Trampolines.swift).
/// Three locks, never nested (ARCHITECTURE.md, "Locks, threads"): `settings`, `control`, and the
/// running path's own lock (SyncPath.state or AsyncPath.state).
final class MatteFilter {
    let handle: ElementHandle
    private let settings = Locked(Settings())
    let control = Locked(Control())
    /// How long the streaming and release threads wait for each other (stats).
    let waits = WaitClock()
    /// Reseed masks being decoded on worker threads (`requestReseed`): `stop` waits for them, so that
    /// no private decoding pipeline outlives the element's stream (an application that stops and
    /// exits, gst_deinit, would otherwise tear GStreamer down under a decode).
    private let maskLoads = DispatchGroup()

    init(handle: ElementHandle) {
        self.handle = handle
        _ = DebugLog.routeEngineLog
    }

    /// The element is being finalized (its last reference gone). A model load that a stop left to finish
    /// on its own thread is waited for here, not in `stop`: the element stops promptly, and still no
    /// load of its runs inside the runtime once the application may exit (or the element's memory is gone).
    func finalizing() {
        if AbandonedLoads.count > 0 {
            DebugLog.log(GST_LEVEL_INFO, handle, "waiting for a model load that a stop left running")
        }
        AbandonedLoads.waitForAll()
    }

    // MARK: Settings

    func snapshot() -> Settings { settings.withLock { $0 } }

    /// Sets a property; false when the set was ignored (a READY-only property while running: no
    /// notify then, as nothing changed).
    @discardableResult
    func setProperty(_ declaration: PropertyDeclaration, _ value: PropertyValue) -> Bool {
        let running = handle.currentState.rawValue > GST_STATE_READY.rawValue
        if declaration.mutability == .ready, running {
            ErrorMapping.postWarning(
                "property '\(declaration.name)' can only be changed in the READY or NULL state; ignored", on: handle)
            return false
        }
        let updated = settings.withLock { current -> Settings in
            declaration.write(&current, value)
            return current
        }
        DebugLog.log(GST_LEVEL_DEBUG, handle, "\(declaration.name) set to \(declaration.read(updated))")
        switch declaration.sideEffect {
        case .renegotiateSource?: handle.reconfigureSource()
        case .loadSeedMask?: if running, updated.seed == .mask { seedMaskChanged(updated) }
        case nil: break
        }
        return true
    }

    func property(_ declaration: PropertyDeclaration) -> PropertyValue { declaration.read(snapshot()) }

    /// A new `seed-mask` while playing: loaded now (on the caller's thread, not the streaming one)
    /// and used from the next (re)seed — a reset, a reseed request — without interrupting the track.
    private func seedMaskChanged(_ current: Settings) {
        do {
            let source = try seedSource(current, maskPath: nil)
            control.withLock { $0.reseed.seed = source }
        } catch {
            ErrorMapping.postWarning("seed-mask \(current.seedMask) cannot be used (\(error)); the previous seed stays", on: handle)
        }
    }

    // MARK: Lifecycle

    /// The `start` vfunc: what `start` threw goes on the bus (ERROR), from here.
    func startVfunc() -> Bool { ErrorMapping.succeeded(on: handle) { try start() } }

    /// The stream's state made (sync: the engine too); a failure is thrown, for `startVfunc` to post.
    func start() throws {
        let current = snapshot()
        let engines: EngineSlot
        if current.mode == .async {
            // Models load on the inference thread: frames leave at once (no-person-alpha) meanwhile.
            // A failure there reaches the bus through the first frame after it (releaseNext).
            engines = EngineSlot(making: { [weak self] in
                guard let self else { throw EngineError.badSettings(detail: "the element is gone") }
                return try self.startEngine(current)
            })
        } else {
            engines = EngineSlot(try startEngine(current))
        }
        let path: FramePath = current.mode == .async
            ? .async(AsyncPath(filter: self, engines: engines, waits: waits))
            : .sync(SyncPath(filter: self, engines: engines, waits: waits))
        DebugLog.log(GST_LEVEL_INFO, handle, "pixel kernels: \(PixelISA.active) (this CPU runs \(PixelISA.supported.last!))")
        control.withLock { control in
            control.path = path
            control.refusedCaps = nil
            control.live = LiveTiming()
            control.latency = LatencyState()
            control.reseed.seed = nil
        }
    }

    func stop() -> Bool {
        // The threads end outside any lock of the element's: they may be finishing a frame.
        if case let .async(path)? = control.withLock({ $0.path.take() }) { path.stop() }
        control.update { control in
            control.reseed = ReseedRequests(pending: nil, seed: nil, count: control.reseed.count + 1)
        }
        // (after the count moved on: a mask that loads now is not used by the next run)
        if maskLoads.wait(timeout: .now() + .milliseconds(Self.maskLoadStopWaitMs)) == .timedOut {
            ErrorMapping.postWarning("a reseed mask was still loading after \(Self.maskLoadStopWaitMs) ms when the element "
                                     + "stopped (a slow or stalled file system?); it is not used", on: handle)
        }
        return true
    }

    /// How long `stop` waits for reseed masks still decoding: a mask decodes in tens of milliseconds;
    /// a stalled file system must not hold a state change much longer.
    static let maskLoadStopWaitMs = 2000

    /// The running stream's frame path (nil when stopped).
    var currentPath: FramePath? { control.withLock { $0.path } }

    /// Makes the engine of `settings` and says so (with a warning when auto fell back to the CPU).
    private func startEngine(_ settings: Settings) throws -> MattingEngine {
        let engine = try makeEngine(settings)
        DebugLog.log(GST_LEVEL_INFO, handle, "started engine \(engine.kind.rawValue) (\(engine.precision.rawValue)) "
                     + "on \(engine.provider.rawValue)" + (engine.placement.isEmpty ? "" : " (\(engine.placement))"))
        if let note = engine.providerNote {
            ErrorMapping.postWarning(note, on: handle)
        }
        return engine
    }

    /// The engine of a stream: the maker a test injected, else the production one.
    private func makeEngine(_ settings: Settings) throws -> MattingEngine {
        try (control.withLock { $0.engineMaker } ?? productionEngine)(settings)
    }

    /// A seam for in-process tests, injected by them before the element starts (never by the plugin):
    /// `wrap` receives the production engine and returns the one the element runs (an engine made
    /// slow on purpose, say), so that the element's timing rules can be driven through real pipelines
    /// on any machine.
    func injectEngineMaker(wrapping wrap: @escaping (MattingEngine) -> MattingEngine) {
        control.withLock { $0.engineMaker = { [unowned self] settings in wrap(try productionEngine(settings)) } }
    }

    private func productionEngine(_ settings: Settings) throws -> MattingEngine {
        var options = EngineOptions(modelDir: settings.modelDir, runtimeLibrary: settings.runtimeLibrary)
        options.session.threads = Int(settings.threads)
        options.session.provider = settings.executionProvider
        options.session.device = Int(settings.gpuDevice)
        options.temporalSmoothing = Double(settings.temporalSmoothing) / 100
        options.rvmDownsampleRatio = settings.downsampleRatio
        options.seeder = settings.seeder
        options.placement = try ModelPlacement.parse(settings.modelPlacement)
        if !settings.inferenceServer.isEmpty {
            var server = ServerOptions(url: settings.inferenceServer)
            server.model = settings.serverModel
            server.timeoutMs = Int(settings.serverTimeout)
            server.tokenFile = settings.serverTokenFile
            server.caFile = settings.serverCaFile
            server.sharedMemory = settings.serverSharedMemory
            server.frameFormat = settings.serverFrameFormat
            // Live chains (async) carry on without the server until it answers; files (sync) need it.
            server.waitForServer = settings.mode == .async
            options.server = server
        }
        var parameters = MatAnyone2Parameters()
        parameters.memEvery = Int(settings.memEvery)
        parameters.maxMemFrames = Int(settings.maxMemFrames)
        parameters.topK = Int(settings.topK)
        parameters.warmup = Int(settings.warmup)
        parameters.maxPeople = Int(settings.maxPeople)
        // The watch judges tracks by the person segmenter: right for seed=auto (the segmenter chose the
        // person), wrong for a mask, which may seed any object: with seed=mask it stays off.
        parameters.watch.interval = settings.seed == .auto ? Int(settings.watchInterval) : 0
        parameters.watch.minimumIoU = Double(settings.watchIoU) / 100
        parameters.watch.maximumUncertainty = Double(settings.watchUncertainty) / 100
        parameters.watch.patience = Int(settings.watchPatience)
        parameters.noPersonAlpha = UInt8(settings.noPersonAlpha)
        // (The segmenter has one precision: auto has nothing to choose for it. MatAnyone2 and RVM run
        // bf16 on the CPUs where it pays.)
        var automatic: AutoPrecision.Choice?
        if settings.precision.set == nil {
            switch resolveEngine(settings.engine, options: options) {
            case .matanyone2: automatic = AutoPrecision.choose(options)
            case .rvm: automatic = AutoPrecision.chooseForRVM(options)
            case .segmenter: automatic = nil
            }
        }
        options.precision = settings.precision.set ?? automatic?.precision ?? .fp32
        if let automatic { DebugLog.log(GST_LEVEL_INFO, handle, "precision=auto: \(automatic.reason)") }
        let make = { (options: EngineOptions) in
            try MatteEngine.makeEngine(settings.engine, options: options, parameters: parameters,
                                       workingShortSide: Int(settings.workingSize),
                                       seed: { try self.seedSource(settings, maskPath: nil) })
        }
        let engine: MattingEngine
        do {
            engine = try make(options)
        } catch where automatic?.precision == .bf16 {
            // What auto chose failed: fp32 runs if it can (then a warning says why bf16 did not, and the
            // stats say fp32); if fp32 fails too, its error is the one posted (the fault is not bf16's).
            let bf16Error = EngineError.classify(error, during: .starting).description
            options.precision = .fp32
            engine = try make(options)
            ErrorMapping.postWarning("precision=auto chose bf16, which failed to load (\(bf16Error)); running fp32 instead "
                                     + "(precision=fp32 skips the attempt)", on: handle)
        }
        return engine
    }

    /// Where seeding comes from: a mask file (`maskPath`, else `seed-mask` with seed=mask), or the
    /// segmenter. An empty mask falls back to the segmenter with a warning.
    private func seedSource(_ settings: Settings, maskPath: String?) throws -> SeedSource {
        let path: String
        if let maskPath {
            path = maskPath
        } else if settings.seed == .mask {
            guard !settings.seedMask.isEmpty else {
                throw EngineError.badSettings(detail: "seed=mask needs seed-mask=PATH (an image, white = the person)")
            }
            path = settings.seedMask
        } else {
            return .automatic
        }
        let mask = try MaskLoader.load(path)
        let coverage = mask.foregroundFraction
        if coverage == 0 {
            ErrorMapping.postWarning("seed mask \(path) has no foreground (no pixel ≥ 128); "
                                     + "seeding from the person segmenter instead", on: handle)
            return .automatic
        }
        if coverage > 0.99 {
            ErrorMapping.postWarning("seed mask \(path) covers the whole image; MatAnyone2 will track everything", on: handle)
        }
        return .mask(pixels: mask.pixels, width: mask.width, height: mask.height)
    }

    /// Asks for a reseed on the next frame (the `reseed` action signal and the `matanyone-reseed`
    /// event); `maskPath` optionally names a new mask. Any thread. A mask is decoded on a worker
    /// thread, not on the caller's (a serialized event must not hold the stream while an image
    /// decodes). For a serialized event the next frame waits for that load (see `awaitReseedMask`),
    /// so the reseed acts on exactly the frame after the event; otherwise it happens on the first
    /// frame after the mask loaded. Requests count in the order they were made: a mask that finishes
    /// loading after a newer request is not used.
    func requestReseed(maskPath: String?, serialized: Bool = false) {
        DebugLog.log(GST_LEVEL_INFO, handle, "reseed requested" + (maskPath.map { " with mask \($0)" } ?? ""))
        // (update: a frame waiting for a mask this request supersedes stops waiting.)
        let ticket = control.update { control -> Int in
            control.reseed.count += 1
            if serialized, let maskPath {
                control.reseed.pending = .loading(MaskLoad(path: maskPath, ticket: control.reseed.count))
            } else if maskPath == nil {
                control.reseed.pending = .ready(nil)
            } else if case .loading = control.reseed.pending {
                control.reseed.pending = nil  // (superseded: no frame waits for a mask that will not be used)
            }
            return control.reseed.count
        }
        guard let maskPath else { return }
        let settings = snapshot()
        handle.retain()  // (the element outlives the load: the load may post a warning on it)
        maskLoads.enter()
        DispatchQueue.global(qos: .userInitiated).async { [self] in
            defer {
                handle.release()
                maskLoads.leave()
            }
            var source: SeedSource?
            do {
                source = try seedSource(settings, maskPath: maskPath)
            } catch {
                ErrorMapping.postWarning("reseed ignored the mask: \(error)", on: handle)
            }
            // (update: the frame waiting for this load finds it.)
            let newest = control.update { control -> Bool in
                guard control.reseed.count == ticket else { return false }
                control.reseed.pending = .ready(source)
                return true
            }
            if !newest { DebugLog.log(GST_LEVEL_DEBUG, handle, "mask \(maskPath) loaded after a newer reseed request: not used") }
        }
    }

    /// How long the frame after a serialized `matanyone-reseed` waits for its mask: a mask decodes
    /// in tens of milliseconds; a load slower than this (a stalled file system) must not stall the
    /// stream, and the reseed then happens on the first frame after the load.
    static let reseedMaskWaitMs = 1000

    /// Before a frame: when a serialized reseed's mask is still loading, waits for it (bounded, on
    /// the control lock's condition, which is released meanwhile), so that the frame right after
    /// the event is the one reseeded. One frame waits for a load, not every frame while it is slow.
    func awaitReseedMask() {
        guard let load = control.withLock({ control -> MaskLoad? in
            guard case var .loading(load) = control.reseed.pending, !load.waited else { return nil }
            load.waited = true
            control.reseed.pending = .loading(load)
            return load
        }) else { return }
        let deadlineMs = monotonicMs() + Double(Self.reseedMaskWaitMs)
        let over = control.wait(deadlineMs: deadlineMs) { control -> Bool? in
            // Over: loaded (ready), taken, or replaced by a newer request.
            if case let .loading(pending) = control.reseed.pending, pending.ticket == load.ticket { return nil }
            return true
        } ?? false
        guard !over else { return }
        ErrorMapping.postWarning("reseed mask \(load.path) took longer than \(Self.reseedMaskWaitMs) ms to load: "
                                 + "the reseed comes on the first frame after it has loaded, not on the frame after the event",
                                 on: handle)
    }

    // MARK: Negotiation

    /// Formats the source pad may carry for the current `output` setting, in order of preference.
    func sourceFormats() -> [String] {
        switch snapshot().output {
        case .auto: return ["BGRA", "RGBA", "GRAY8"]
        case .alpha: return ["GRAY8"]
        case .composite: return ["BGRA", "RGBA"]
        }
    }

    static let rgbFormats: Set<String> = ["BGRA", "RGBA"]
    /// Limited range (GST_VIDEO_COLOR_RANGE_16_235), matrix, transfer and primaries unknown, as a
    /// colorimetry string.
    static let limitedRangeGray = "2:0:0:0"

    /// Caps on the other pad for `caps` on the pad in `direction`.
    func transformCaps(direction: GstPadDirection, caps: UnsafeMutablePointer<GstCaps>,
                       filter: UnsafeMutablePointer<GstCaps>?) -> UnsafeMutablePointer<GstCaps> {
        let formats = direction == GST_PAD_SINK ? sourceFormats() : ["BGRA"]
        let grayRange = snapshot().grayRange
        var result = gst_caps_new_empty()!
        for index in 0..<gst_caps_get_size(caps) {
            let structure = gst_caps_get_structure(caps, index)!
            let given = gst_structure_get_string(structure, "format").map { String(cString: $0) }
            for format in formats {
                let copy = gst_structure_copy(structure)!
                // The composite keeps the frame's colours: its colour description carries over between
                // RGB formats (a bt709 frame leaves labelled bt709), never to or from the grey alpha.
                // Size, pixel aspect ratio and interlacing carry over as they are.
                if format == "GRAY8" || !MatteFilter.rgbFormats.contains(given ?? "") {
                    gst_structure_remove_field(copy, "colorimetry")
                }
                // The alpha's label (see GrayRange); left open for full range, so that a capsfilter may pick.
                if format == "GRAY8" && grayRange == .limited {
                    shim_structure_set_string(copy, "colorimetry", MatteFilter.limitedRangeGray)
                }
                gst_structure_remove_field(copy, "chroma-site")
                shim_structure_set_string(copy, "format", format)
                // (The caps features, format:Interlaced included, carry over as they are.)
                result = gst_caps_merge_structure_full(result, copy, gst_caps_get_features(caps, index).map { gst_caps_features_copy($0) })
            }
        }
        let template = handle.padTemplateCaps(direction == GST_PAD_SINK ? GST_PAD_SRC : GST_PAD_SINK)
        var combined = gst_caps_intersect(result, template)!
        gst_caps_unref(result)
        gst_caps_unref(template)
        if let filter {
            let filtered = gst_caps_intersect_full(filter, combined, GST_CAPS_INTERSECT_FIRST)!
            gst_caps_unref(combined)
            combined = filtered
        }
        return combined
    }

    /// New caps on both pads (set_caps). Caps of the same size (another framerate, output format or
    /// colorimetry) keep the track; another size starts it over (`startSize`).
    func setInfo(input: UnsafeMutablePointer<GstVideoInfo>, output outputInfo: UnsafeMutablePointer<GstVideoInfo>) -> Bool {
        guard let negotiated = negotiatedOutput(outputInfo) else { return false }
        let width = Int(input.pointee.width), height = Int(input.pointee.height)
        guard width == Int(outputInfo.pointee.width), height == Int(outputInfo.pointee.height) else {
            ErrorMapping.postError(ElementError.sizesDiffer, on: handle)
            return false
        }
        let interlacing = input.pointee.interlace_mode
        let capsKey = "\(width)×\(height) → \(negotiated), interlacing \(interlacing.rawValue)"
        guard interlacing == GST_VIDEO_INTERLACE_MODE_PROGRESSIVE else {
            refuseInterlaced(interlacing, capsKey: capsKey)
            return false
        }
        if control.withLock({ $0.refusedCaps == capsKey }) {
            DebugLog.log(GST_LEVEL_DEBUG, handle, "caps \(capsKey) were refused already; not reporting again")
            return false
        }
        DebugLog.log(GST_LEVEL_INFO, handle, "negotiated \(capsKey)")
        let current = snapshot()
        // Sync mode with BGRA out works in place: the composite is written over the frame it reads (each
        // pixel from itself, the blur and the edge colours computed first), so no output buffer is
        // allocated and no frame copied. Same bytes out.
        guard let path = currentPath else { return false }
        var inPlace = false
        let outcome: SizeOutcome
        switch path {
        case let .sync(path):
            inPlace = negotiated == .composite(.bgra)
            outcome = path.negotiated(negotiated, width: width, height: height)
        case let .async(path):
            outcome = path.negotiated(negotiated, input: input.pointee, settings: current)
        }
        handle.setInPlace(inPlace)
        switch outcome {
        case let .failed(error):
            control.withLock { $0.refusedCaps = capsKey }
            ErrorMapping.postError(error, on: handle)
            return false
        case .sameSize:
            DebugLog.log(GST_LEVEL_DEBUG, handle, "same size: the track continues")
            return true
        case let .started(ms):
            DebugLog.log(GST_LEVEL_DEBUG, handle, "warm-up at \(width)×\(height): \(ms) ms")
            startLatency(warmUpMs: ms, settings: current)
            return true
        }
    }

    /// What the source pad carries for its negotiated format (nil, with an error on the bus, for a
    /// format the element does not make).
    private func negotiatedOutput(_ info: UnsafeMutablePointer<GstVideoInfo>) -> NegotiatedOutput? {
        switch info.pointee.finfo.pointee.format {
        case GST_VIDEO_FORMAT_GRAY8: return .alpha
        case GST_VIDEO_FORMAT_BGRA: return .composite(.bgra)
        case GST_VIDEO_FORMAT_RGBA: return .composite(.rgba)
        default:
            ErrorMapping.postError(ElementError.unsupportedOutputFormat, on: handle)
            return nil
        }
    }

    /// Interlaced caps are refused, once on the bus per caps: a woven frame's two fields are two
    /// instants, and the matte would comb at every moving edge.
    private func refuseInterlaced(_ interlacing: GstVideoInterlaceMode, capsKey: String) {
        let reported = control.withLock { control -> Bool in
            defer { control.refusedCaps = capsKey }
            return control.refusedCaps == capsKey
        }
        guard !reported else { return }
        let mode = String(cString: gst_video_interlace_mode_to_string(interlacing))
        ErrorMapping.postError(ElementError.streamFormat("interlaced input (interlace-mode=\(mode)) is not matted: put deinterlace "
                                                         + "in front of the element (… ! deinterlace ! videoconvert ! "
                                                         + "video/x-raw,format=BGRA ! matanyone …)"), on: handle)
    }

    /// The latency reported from a new size on. In async mode a frame costs its copy and composite,
    /// not an inference: the latency starts from the delay and learns the rest.
    private func startLatency(warmUpMs: Double, settings current: Settings) {
        control.withLock {
            $0.latency = current.mode == .async
                ? LatencyState(tracker: LatencyTracker(), warmUpMs: 0,
                               heldMs: max(Double(current.asyncDelay), AsyncPath.quickWaitMs))
                : LatencyState(tracker: LatencyTracker(), warmUpMs: warmUpMs)
        }
    }

    // MARK: Events and queries

    /// A serialized event on its way downstream, before the base class sees it: which ones start the
    /// track over, and which make async mode let its held frames go first. True when the element took
    /// `raw` (held behind frames, to go on after them).
    func sinkEvent(_ event: SinkEvent, _ raw: UnsafeMutablePointer<GstEvent>) -> Bool {
        switch event {
        case .flushStart:
            asyncPath?.flushStart()
        case .flushStop:
            asyncPath?.flushStop()
            resetStream(reason: "FLUSH_STOP")
        case .endOfStream:
            // Async mode holds frames: they leave before EOS, and before caps of another format.
            asyncPath?.endOfStream()
        case .caps:
            asyncPath?.capsComing()
        case .streamStart:
            asyncPath?.waitForHeldFrames()
            resetStream(reason: "STREAM_START")
        case let .segment(segment):
            asyncPath?.waitForHeldFrames()
            // A seek's new segment starts the track over; the same segment sent again does not.
            if !segment.sameTimeline(as: handle.inputSegment) { resetStream(reason: "new segment") }
        case let .reseed(maskPath, serialized):
            requestReseed(maskPath: maskPath, serialized: serialized)
            if serialized { return asyncPath?.holdOrWait(raw) ?? false }
        case let .other(serialized):
            if serialized { return asyncPath?.holdOrWait(raw) ?? false }
        }
        return false
    }

    /// The async path, if that is the mode (its events and queries are its own).
    private var asyncPath: AsyncPath? {
        if case let .async(path)? = currentPath { return path }
        return nil
    }

    /// A query, answered by the base class (`parent`): in async mode with a delay, DRAIN first lets
    /// every held frame go (upstream wants its buffers back), and ALLOCATION, on which the base class
    /// may renegotiate, never runs while the release thread renders or pushes a frame.
    func query(direction: GstPadDirection, type: GstQueryType, parent: () -> Bool) -> Bool {
        guard direction == GST_PAD_SINK, type == GST_QUERY_ALLOCATION || type == GST_QUERY_DRAIN,
              let path = asyncPath else { return parent() }
        return path.query(type, parent: parent)
    }

    /// An event from downstream; true when it is ours and ends here (not passed further upstream).
    func sourceEvent(_ event: SourceEvent) -> Bool {
        switch event {
        case let .latency(nanoseconds):
            latencyConfigured(nanoseconds)
        case .qos:
            sawDownstreamQoS()
        case let .reseed(maskPath):
            requestReseed(maskPath: maskPath)
            return true
        case .other:
            break
        }
        return false
    }

    /// Forgets temporal state (FLUSH_STOP, STREAM_START, a new segment).
    private func resetStream(reason: String) {
        DebugLog.log(GST_LEVEL_DEBUG, handle, "reset: \(reason)")
        guard let path = currentPath else { return }
        path.forgetTrack()
        path.requestTarget?.reset()
    }

    /// Every buffer as it reaches the element, before any QoS decision: counted, and judged by the
    /// gap rule (GapRule). A DISCONT buffer (a leaky queue, QoS, network loss) is a gap, not a new
    /// stream; only upstream's silence longer than `reset-after-gap` (or, with 0, any DISCONT) resets.
    func arrived(_ arrival: GapRule.Arrival, pts: GstClockTime) {
        let resetAfterMs = snapshot().resetAfterGap
        let timing = control.withLock { $0.live }
        let pipeline = GapRule.Pipeline(live: timing.live, configuredLatency: timing.configuredLatency)
        guard let path = currentPath else { return }
        let reset = path.withCore { core -> Bool in
            core.framesSubmitted += 1
            switch core.gaps.arrive(arrival, resetAfterMs: resetAfterMs, pipeline: pipeline) {
            case let .reset(reason):
                DebugLog.log(GST_LEVEL_DEBUG, handle, "reset at pts \(pts): \(reason)")
                return true
            case let .kept(reason):
                DebugLog.log(GST_LEVEL_DEBUG, handle, "pts \(pts): \(reason): no silence upstream, the track continues")
            case .continues:
                if arrival.isDiscont { DebugLog.log(GST_LEVEL_LOG, handle, "DISCONT at pts \(pts): a gap, the track continues") }
            }
            return false
        }
        if reset { path.requestTarget?.reset() }
    }

    /// The pipeline's latency, from the LATENCY event (a live pipeline sends it when it configures).
    private func latencyConfigured(_ nanoseconds: UInt64) {
        DebugLog.log(GST_LEVEL_DEBUG, handle, "pipeline latency configured: \(Double(nanoseconds) / 1e6) ms")
        control.withLock { $0.live.configuredLatency = nanoseconds }
    }

    /// A QoS event came from downstream: a sink there synchronises to the clock.
    private func sawDownstreamQoS() { control.withLock { $0.live.downstreamQoS = true } }

    /// A live chain whose sink sends no QoS (udpsink, a sink without sync) drops nothing when the
    /// element is slower than the stream: frames reach it ever later and nothing says so. When they
    /// arrive more than `backlogAllowanceNs` past their time (beyond the pipeline's latency) for a
    /// second of stream time, a WARNING says so with the fixes, once per run.
    func watchBacklog(_ timing: (runningTime: UInt64, now: UInt64)?) {
        guard let timing else { return }
        let lagMs: Double? = control.withLock { control in
            var live = control.live
            defer { control.live = live }
            guard live.live, !live.downstreamQoS, !live.warnedBehind else { return nil }
            guard timing.now > timing.runningTime &+ (live.configuredLatency ?? 0) &+ MatteFilter.backlogAllowanceNs else {
                live.behindSince = nil
                return nil
            }
            let since = live.behindSince ?? timing.runningTime
            live.behindSince = since
            guard timing.runningTime >= since &+ 1_000_000_000 else { return nil }
            live.warnedBehind = true
            return Double(timing.now - timing.runningTime) / 1e6
        }
        guard let lagMs else { return }
        let costMs = control.withLock { $0.latency.tracker.expectedMs(fallbackMs: $0.latency.warmUpMs) }
        ErrorMapping.postWarning(
            "the chain falls behind the live stream: frames reach this element \(Int(lagMs)) ms after their time (it takes about "
            + "\(Int(costMs.rounded())) ms a frame), and no element downstream sends QoS, so nothing drops the late ones. "
            + "Use mode=async (every frame at the input rate), a faster output (GRAY8, edge-colors=original) or engine, "
            + "a sink with qos=true, or a leaky queue in front", on: handle)
    }

    /// How far past its time (beyond the pipeline latency) a live frame may arrive before the chain counts as behind.
    static let backlogAllowanceNs: UInt64 = 1_000_000_000

    /// Predictive QoS: a live frame whose running time plus the pipeline latency (when the sink will
    /// show it) comes before now plus what this element expects a frame to cost would reach the sink
    /// late, so it is dropped before any work is spent on it. Returns how late it would be (ns), or
    /// nil to process it. The base class still applies the sink's own QoS feedback afterwards.
    func lateness(runningTime: UInt64, now: UInt64) -> UInt64? {
        guard snapshot().mode == .sync else { return nil }  // async frames cost a composite, not an inference
        let timing = control.withLock { $0.live }
        guard timing.live, timing.downstreamQoS, let configured = timing.configuredLatency else { return nil }
        let expectedMs = control.withLock { $0.latency.tracker.expectedMs(fallbackMs: $0.latency.warmUpMs) }
        let expected = UInt64(max(expectedMs, 0) * 1_000_000)
        let ready = now &+ expected, deadline = runningTime &+ configured
        // Never starve: after a second (or four frames' cost) of drops one frame goes through, so the
        // estimate follows a machine that got faster and a reconfigured pipeline.
        let starving = timing.lastAdmitted.map { runningTime > $0 &+ max(1_000_000_000, 4 &* expected) } ?? true
        guard ready > deadline, !starving else {
            DebugLog.log(GST_LEVEL_LOG, handle, "admitting a frame: arrived \(Double(Int64(now) - Int64(runningTime)) / 1e6) ms "
                         + "after its running time, expected cost \(expectedMs) ms, pipeline latency \(Double(configured) / 1e6) ms")
            control.withLock { $0.live.lastAdmitted = runningTime }
            return nil
        }
        let late = ready - deadline
        DebugLog.log(GST_LEVEL_LOG, handle, "dropping a frame before work: it would reach the sink \(Double(late) / 1e6) ms late")
        return late
    }

    /// Whether a meta with these tags stays valid on the output (copied there), else the base
    /// class decides (it keeps metas without tags). The element never changes the picture's geometry:
    /// what depends only on the video, its size or orientation stays (regions of interest, affine
    /// transformations, …); what depends on the colour space stays on a composite (RGB in, the
    /// same RGB out) but not on the grey alpha; memory-bound metas (GstVideoMeta: strides of
    /// the input's memory) never carry over.
    func keepsMeta(tags: [String]) -> Bool {
        guard !tags.isEmpty else { return false }
        var valid: Set<String> = ["video", "size", "orientation"]
        if currentPath?.withCore({ $0.output }) != .alpha { valid.insert("colorspace") }
        return tags.allSatisfy(valid.contains)
    }

    /// Frames submitted and processed so far (QoS message statistics).
    var frameCounts: (submitted: UInt, processed: UInt) {
        currentPath?.withCore { ($0.framesSubmitted, $0.framesProcessed) } ?? (0, 0)
    }

    /// How many frames async mode may hold with a delay: `async-max-frames`, or with 0 (auto) the
    /// frames of the delay at the stream's rate (60 fps when it has none) and four more.
    static func heldFrameBound(_ settings: Settings, framesPerSecond: Double) -> Int {
        if settings.asyncMaxFrames > 0 { return Int(settings.asyncMaxFrames) }
        let rate = framesPerSecond > 0 ? framesPerSecond : 60
        return min(Int((Double(settings.asyncDelay) / 1000 * rate).rounded(.up)) + 4, 1000)
    }


    /// Input buffers the inference thread may hold at once (a frame waiting, one under inference).
    static let inferenceBuffers = 2

    /// Answers upstream's ALLOCATION query: the base class's answer, plus, in async mode, the frames
    /// it may hold with a delay (`async-max-frames`) and those the inference thread reads: a pool
    /// with fewer buffers than that would stall upstream waiting for one the element keeps.
    func proposeAllocation(decideQuery: UnsafeMutablePointer<GstQuery>?, query: UnsafeMutablePointer<GstQuery>) -> Bool {
        guard handle.parentProposeAllocation(decideQuery, query) else { return false }
        let current = snapshot()
        if current.mode == .async {
            // The inference thread reads the input buffers themselves (no copy): it holds up to two
            // (one waiting, one under inference) for as long as an inference takes.
            let held = current.asyncDelay > 0
                ? MatteFilter.heldFrameBound(current, framesPerSecond: handle.videoInfo(of: query)?.framesPerSecond ?? 0) : 0
            handle.addMinimumBuffers(held + MatteFilter.inferenceBuffers, to: query)
        }
        return true
    }

    /// Adjusts an answered LATENCY query by what this element really costs.
    func answerLatency(live: Bool, minimum: GstClockTime, maximum: GstClockTime) -> (GstClockTime, GstClockTime) {
        let ms = control.withLock { control in
            control.live.live = live
            return control.latency.tracker.answer(fallbackMs: control.latency.warmUpMs) + control.latency.heldMs
        }
        let ours = GstClockTime(ms * 1_000_000)
        DebugLog.log(GST_LEVEL_DEBUG, handle, "latency query: adding \(ms) ms (live: \(live))")
        let none = shim_clock_time_none()
        return (minimum + ours, maximum == none ? none : maximum + ours)
    }
}
