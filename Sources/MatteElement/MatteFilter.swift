import CGStreamer
import Foundation
import MatteEngine

/// What the source pad carries after negotiation.
enum NegotiatedOutput: Equatable {
    case alpha
    case composite(CompositeFormat)
}

/// A value behind a lock (the gst-plugins-rs `Mutex<…>` pattern). Our own lock, not GStreamer's: the
/// streaming, query and application threads all reach the element, and ThreadSanitizer sees this one.
final class Locked<Value> {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// Per-stream state: created in `start`, completed in `setInfo` for the negotiated caps, dropped in
/// `stop`. Only reached under `MatteFilter.stream`'s lock.
private final class StreamState {
    let engine: MattingEngine
    var report: FrameReport
    var framesSubmitted: UInt = 0
    var framesProcessed: UInt = 0
    // Negotiated (setInfo).
    var output = NegotiatedOutput.alpha
    var alphaPlane: [UInt8] = []
    var compositor = Compositor()

    init(engine: MattingEngine) {
        self.engine = engine
        report = FrameReport(modelCount: engine.modelNames.count)
    }
}

/// What the LATENCY query reads from the query thread while frames run: kept apart from the stream
/// state so that a query never waits for a frame in progress.
private struct LatencyState {
    var tracker = LatencyTracker()
    var warmUpMs = 0.0
}

/// A bus message to post once the stream lock is released: a synchronous bus handler may call back
/// into the element (a LATENCY query, a state change) from this very thread.
private enum Post {
    case error(Error)
    case streamError(String)
    case latency
    case stats(UnsafeMutablePointer<GstStructure>)
}

/// The element's behaviour. One instance per `GstMatAnyone`, owned by it (see Trampolines.swift).
final class MatteFilter {
    let handle: ElementHandle
    private let settings = Locked(Settings())
    private let stream = Locked<StreamState?>(nil)
    private let latency = Locked(LatencyState())
    /// A reseed asked for by a signal or event: nil nothing pending; .some(nil) as configured;
    /// .some(source) from that source.
    private let pendingReseed = Locked<SeedSource??>(nil)
    /// A seed mask set while playing: used from the next (re)seed on.
    private let pendingSeed = Locked<SeedSource?>(nil)
    /// Caps whose set-up failed and was reported: base transform retries them on every buffer, and
    /// the same error must reach the bus once, not once a buffer.
    private let refusedCaps = Locked<String?>(nil)

    init(handle: ElementHandle) {
        self.handle = handle
        _ = DebugLog.routeEngineLog
    }

    // MARK: Settings

    func snapshot() -> Settings { settings.withLock { $0 } }

    func setProperty(_ declaration: PropertyDeclaration, _ value: PropertyValue) {
        let running = handle.currentState.rawValue > GST_STATE_READY.rawValue
        if declaration.mutability == .ready, running {
            ErrorMapping.postWarning(
                "property '\(declaration.name)' can only be changed in the READY or NULL state; ignored", on: handle)
            return
        }
        let updated = settings.withLock { current -> Settings in
            declaration.write(&current, value)
            return current
        }
        DebugLog.log(GST_LEVEL_DEBUG, handle, "\(declaration.name) set to \(declaration.read(updated))")
        if declaration.name == "output" { handle.reconfigureSource() }
        if declaration.name == "seed-mask", running, updated.seed == .mask { seedMaskChanged(updated) }
    }

    func property(_ declaration: PropertyDeclaration) -> PropertyValue { declaration.read(snapshot()) }

    /// A new `seed-mask` while playing: loaded now (on the caller's thread, not the streaming one)
    /// and used from the next (re)seed — a reset, a reseed request — without interrupting the track.
    private func seedMaskChanged(_ current: Settings) {
        do {
            let source = try seedSource(current, maskPath: nil)
            pendingSeed.withLock { $0 = source }
        } catch {
            ErrorMapping.postWarning("seed-mask \(current.seedMask) cannot be used (\(error)); the previous seed stays", on: handle)
        }
    }

    // MARK: Lifecycle

    func start() -> Bool {
        let current = snapshot()
        let engine: MattingEngine
        do {
            engine = try makeEngine(current)
        } catch {
            ErrorMapping.postError(error, on: handle)
            return false
        }
        DebugLog.log(GST_LEVEL_INFO, handle, "started engine \(engine.kind.rawValue) (\(engine.precision.rawValue)) "
                     + "on \(engine.provider.rawValue)")
        if current.executionProvider == .auto, engine.provider == .cpu {
            ErrorMapping.postWarning("execution-provider=auto: the loaded ONNX Runtime has no GPU execution provider "
                                     + "(install one with scripts/setup.sh --gpu); running on the CPU", on: handle)
        }
        stream.withLock { $0 = StreamState(engine: engine) }
        refusedCaps.withLock { $0 = nil }
        latency.withLock { $0 = LatencyState() }
        pendingSeed.withLock { $0 = nil }
        return true
    }

    func stop() -> Bool {
        stream.withLock { $0 = nil }
        pendingReseed.withLock { $0 = nil }
        pendingSeed.withLock { $0 = nil }
        return true
    }

    private func makeEngine(_ settings: Settings) throws -> MattingEngine {
        var options = EngineOptions(modelDir: settings.modelDir, runtimeLibrary: settings.runtimeLibrary)
        options.session.threads = Int(settings.threads)
        options.session.provider = settings.executionProvider
        options.precision = settings.precision
        var parameters = MatAnyone2Parameters()
        parameters.memEvery = Int(settings.memEvery)
        parameters.maxMemFrames = Int(settings.maxMemFrames)
        parameters.topK = Int(settings.topK)
        parameters.warmup = Int(settings.warmup)
        return try MatteEngine.makeEngine(settings.engine, options: options, parameters: parameters,
                                          workingShortSide: Int(settings.workingSize),
                                          seed: { try seedSource(settings, maskPath: nil) })
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
    /// event); `maskPath` optionally names a new mask. Any thread.
    func requestReseed(maskPath: String?) {
        var source: SeedSource?
        if let maskPath {
            do {
                source = try seedSource(snapshot(), maskPath: maskPath)
            } catch {
                ErrorMapping.postWarning("reseed ignored the mask: \(error)", on: handle)
            }
        }
        DebugLog.log(GST_LEVEL_INFO, handle, "reseed requested" + (maskPath.map { " with mask \($0)" } ?? ""))
        pendingReseed.withLock { $0 = .some(source) }
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

    /// Caps on the other pad for `caps` on the pad in `direction`.
    func transformCaps(direction: GstPadDirection, caps: UnsafeMutablePointer<GstCaps>,
                       filter: UnsafeMutablePointer<GstCaps>?) -> UnsafeMutablePointer<GstCaps> {
        let formats = direction == GST_PAD_SINK ? sourceFormats() : ["BGRA"]
        var result = gst_caps_new_empty()!
        for index in 0..<gst_caps_get_size(caps) {
            let structure = gst_caps_get_structure(caps, index)!
            for format in formats {
                let copy = gst_structure_copy(structure)!
                // Colour description does not carry over between RGB and grey.
                gst_structure_remove_field(copy, "colorimetry")
                gst_structure_remove_field(copy, "chroma-site")
                shim_structure_set_string(copy, "format", format)
                result = gst_caps_merge_structure(result, copy)
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

    func setInfo(input: UnsafeMutablePointer<GstVideoInfo>, output outputInfo: UnsafeMutablePointer<GstVideoInfo>) -> Bool {
        let negotiated: NegotiatedOutput
        switch outputInfo.pointee.finfo.pointee.format {
        case GST_VIDEO_FORMAT_GRAY8: negotiated = .alpha
        case GST_VIDEO_FORMAT_BGRA: negotiated = .composite(.bgra)
        case GST_VIDEO_FORMAT_RGBA: negotiated = .composite(.rgba)
        default:
            ErrorMapping.postSettingsError("unsupported output format", on: handle)
            return false
        }
        let width = Int(input.pointee.width), height = Int(input.pointee.height)
        guard width == Int(outputInfo.pointee.width), height == Int(outputInfo.pointee.height) else {
            ErrorMapping.postSettingsError("input and output sizes differ", on: handle)
            return false
        }
        let capsKey = "\(width)×\(height) → \(negotiated)"
        if refusedCaps.withLock({ $0 == capsKey }) {
            DebugLog.log(GST_LEVEL_DEBUG, handle, "caps \(capsKey) were refused already; not reporting again")
            return false
        }
        DebugLog.log(GST_LEVEL_INFO, handle, "negotiated \(capsKey)")
        // New caps: temporal state no longer applies (warmUp resets it). One run at the new size
        // warms the runtime up and gives the first latency estimate.
        let result: Result<Double, Error>? = stream.withLock { state in
            guard let state else { return nil }
            state.output = negotiated
            state.alphaPlane = [UInt8](repeating: 0, count: width * height)
            return Result { try state.engine.warmUp(width: width, height: height) }
        }
        switch result {
        case nil:
            return false
        case let .failure(error)?:
            refusedCaps.withLock { $0 = capsKey }
            ErrorMapping.postError(error, on: handle)
            return false
        case let .success(ms)?:
            DebugLog.log(GST_LEVEL_DEBUG, handle, "warm-up at \(width)×\(height): \(ms) ms")
            latency.withLock { $0 = LatencyState(tracker: LatencyTracker(), warmUpMs: ms) }
            return true
        }
    }

    // MARK: Events and queries

    /// Forgets temporal state (FLUSH_STOP, STREAM_START, DISCONT).
    func resetStream(reason: String) {
        DebugLog.log(GST_LEVEL_DEBUG, handle, "reset: \(reason)")
        stream.withLock { $0?.engine.reset() }
    }

    func countSubmitted() { stream.withLock { $0?.framesSubmitted += 1 } }

    /// Adjusts an answered LATENCY query by what this element really costs.
    func answerLatency(live: Bool, minimum: GstClockTime, maximum: GstClockTime) -> (GstClockTime, GstClockTime) {
        let ms = latency.withLock { $0.tracker.answer(fallbackMs: $0.warmUpMs) }
        let ours = GstClockTime(ms * 1_000_000)
        DebugLog.log(GST_LEVEL_DEBUG, handle, "latency query: adding \(ms) ms (live: \(live))")
        let none = shim_clock_time_none()
        return (minimum + ours, maximum == none ? none : maximum + ours)
    }

    // MARK: Frames

    func transform(input: VideoFrameView, output destination: VideoFrameView) -> GstFlowReturn {
        var posts: [Post] = []
        let flow = stream.withLock { state -> GstFlowReturn in
            guard let state else { return GST_FLOW_NOT_NEGOTIATED }
            return process(input, into: destination, state: state, posts: &posts)
        }
        for post in posts { deliver(post) }
        return flow
    }

    private func process(_ input: VideoFrameView, into destination: VideoFrameView, state: StreamState,
                         posts: inout [Post]) -> GstFlowReturn {
        if let problem = input.layoutProblem(bytesPerPixel: 4) ?? destination.layoutProblem(bytesPerPixel: state.output == .alpha ? 1 : 4) {
            posts.append(.streamError(problem))
            return GST_FLOW_ERROR
        }
        let current = snapshot()
        let engine = state.engine
        if let source = pendingSeed.withLock({ pending -> SeedSource? in defer { pending = nil }; return pending }) {
            engine.replaceSeed(source)
        }
        if input.isDiscont {
            DebugLog.log(GST_LEVEL_LOG, handle, "DISCONT at pts \(input.pts): reset")
            engine.reset()
        }
        if let reseed = pendingReseed.withLock({ pending -> SeedSource?? in defer { pending = nil }; return pending }) {
            DebugLog.log(GST_LEVEL_LOG, handle, "reseeding at pts \(input.pts)")
            engine.reseed(reseed)
        }
        let start = monotonicMs()
        state.report.clear()
        let frame = input.bgra
        do {
            switch state.output {
            case .alpha:
                try engine.matte(frame, into: destination.gray, report: &state.report)
            case let .composite(format):
                try composite(frame, into: destination, format: format, state: state, settings: current)
            }
        } catch {
            posts.append(.error(error))
            return GST_FLOW_ERROR
        }
        state.framesProcessed += 1
        let totalMs = monotonicMs() - start
        DebugLog.log(GST_LEVEL_LOG, handle, "frame \(state.framesProcessed) pts \(input.pts): \(totalMs) ms, "
                     + "seeded \(state.report.seeded), memory frames \(state.report.memoryFrames)")
        // Seeding (the warm-up passes) happens once; it is reported as seed-ms, not as latency.
        let (drifted, latencyMs) = latency.withLock { ($0.tracker.add(totalMs - state.report.seedMs), $0.tracker.currentMs) }
        if drifted { posts.append(.latency) }
        if current.statsInterval > 0, state.framesProcessed % UInt(current.statsInterval) == 0 {
            posts.append(.stats(stats(pts: input.pts, totalMs: totalMs, latencyMs: latencyMs, state: state)))
        }
        return GST_FLOW_OK
    }

    private func composite(_ frame: BGRAImage, into destination: VideoFrameView, format: CompositeFormat,
                           state: StreamState, settings current: Settings) throws {
        let width = frame.width, height = frame.height
        try state.alphaPlane.withUnsafeMutableBufferPointer { plane in
            let alpha = GrayImage(base: plane.baseAddress!, width: width, height: height, stride: width)
            try state.engine.matte(frame, into: alpha, report: &state.report)
            let compositeStart = monotonicMs()
            state.compositor.composite(frame: frame, alpha: alpha, output: destination.bytes,
                                       outputStride: destination.stride, format: format,
                                       background: current.background, color: current.backgroundColor)
            state.report.postprocessMs += monotonicMs() - compositeStart
        }
    }

    private func deliver(_ post: Post) {
        switch post {
        case let .error(error): ErrorMapping.postError(error, on: handle)
        case let .streamError(text): ErrorMapping.postStreamFormatError(text, on: handle)
        case .latency: handle.postLatencyMessage()
        case let .stats(structure): handle.postElementMessage(structure)
        }
    }

    private func stats(pts: GstClockTime, totalMs: Double, latencyMs: Double, state: StreamState) -> UnsafeMutablePointer<GstStructure> {
        let report = state.report, engine = state.engine
        let stats = gst_structure_new_empty("matanyone-stats")!
        shim_structure_set_uint64(stats, "frame", state.framesProcessed)
        shim_structure_set_uint64(stats, "pts", pts)
        shim_structure_set_string(stats, "engine", engine.kind.rawValue)
        shim_structure_set_string(stats, "precision", engine.precision.rawValue)
        shim_structure_set_double(stats, "preprocess-ms", report.preprocessMs)
        shim_structure_set_double(stats, "inference-ms", report.inferenceMs)
        shim_structure_set_double(stats, "postprocess-ms", report.postprocessMs)
        shim_structure_set_double(stats, "total-ms", totalMs)
        shim_structure_set_double(stats, "memory-ms", report.memoryMs)
        shim_structure_set_double(stats, "latency-ms", latencyMs)
        shim_structure_set_uint64(stats, "frames-dropped", state.framesSubmitted &- state.framesProcessed)
        shim_structure_set_boolean(stats, "seeded", report.seeded ? 1 : 0)
        shim_structure_set_uint(stats, "memory-frames", UInt32(report.memoryFrames))
        if report.seedMs > 0 { shim_structure_set_double(stats, "seed-ms", report.seedMs) }
        for (name, ms) in zip(engine.modelNames, report.modelMs) {
            shim_structure_set_double(stats, name + "-ms", ms)
        }
        return stats
    }
}
