import CGStreamer
import Foundation
import MatteEngine

/// What the source pad carries after negotiation.
enum NegotiatedOutput: Equatable {
    case alpha
    case composite(CompositeFormat)
}

/// The element's behaviour. One instance per `GstMatAnyone`, owned by it (see Trampolines.swift).
/// Settings may change from any thread (under `settingsLock`); everything else belongs to the
/// streaming thread between `start` and `stop`.
final class MatteFilter {
    let handle: ElementHandle
    private let settingsLock = NSLock()
    private var settings = Settings()

    // Created in start(), dropped in stop().
    private var engine: MattingEngine?
    private var report = FrameReport(modelCount: 0)
    private var latency = LatencyTracker()
    private var framesSubmitted: UInt = 0
    private var framesProcessed: UInt = 0
    private var activeEngineName = ""
    private var activePrecision = ModelPrecision.fp32

    // Created in setInfo() for the negotiated caps.
    private var output = NegotiatedOutput.alpha
    private var alphaPlane: [UInt8] = []
    private var compositor = Compositor()
    private var warmUpMs = 0.0

    init(handle: ElementHandle) { self.handle = handle }

    // MARK: Settings

    func snapshot() -> Settings {
        settingsLock.lock()
        defer { settingsLock.unlock() }
        return settings
    }

    func setProperty(_ id: PropertyID, _ value: PropertyValue) {
        let declaration = PropertyDeclaration.all.first { $0.id == id }!
        if declaration.mutability == .ready, handle.currentState.rawValue > GST_STATE_READY.rawValue {
            ErrorMapping.postWarning(
                "property '\(declaration.name)' can only be changed in the READY or NULL state; ignored",
                on: handle)
            return
        }
        settingsLock.lock()
        settings.set(id, to: value)
        settingsLock.unlock()
        if id == .output { handle.reconfigureSource() }
    }

    func property(_ id: PropertyID) -> PropertyValue { snapshot().value(of: id) }

    // MARK: Lifecycle

    func start() -> Bool {
        let current = snapshot()
        do {
            engine = try makeEngine(current)
        } catch {
            ErrorMapping.postError(error, on: handle)
            return false
        }
        if current.executionProvider == .auto, engine?.provider == .cpu {
            ErrorMapping.postWarning("execution-provider=auto: the loaded ONNX Runtime has no GPU execution provider "
                                     + "(install one with scripts/setup.sh --gpu); running on the CPU", on: handle)
        }
        report = FrameReport(modelCount: engine!.modelNames.count)
        latency.reset()
        framesSubmitted = 0
        framesProcessed = 0
        return true
    }

    func stop() -> Bool {
        engine = nil
        _ = takePendingReseed()
        alphaPlane = []
        compositor = Compositor()
        return true
    }

    private func makeEngine(_ settings: Settings) throws -> MattingEngine {
        var options = EngineOptions(modelDir: settings.modelDir, runtimeLibrary: settings.runtimeLibrary)
        options.session.threads = Int(settings.threads)
        options.session.provider = ExecutionProvider(rawValue: settings.executionProvider.nick) ?? .auto
        options.precision = ModelPrecision(rawValue: settings.precision.nick) ?? .fp32
        let useMatAnyone2: Bool
        switch settings.engine {
        case .segmenter: useMatAnyone2 = false
        case .matanyone2: useMatAnyone2 = true
        case .auto:
            // Either set counts: with precision=int8 and only the fp32 set, the user gets the error
            // that says how to make the int8 set rather than a silent switch to the segmenter.
            useMatAnyone2 = ModelLocations.hasMatAnyone2Set(modelDir: settings.modelDir, precision: options.precision)
                || ModelLocations.hasMatAnyone2Set(modelDir: settings.modelDir, precision: .fp32)
        }
        guard useMatAnyone2 else {
            activeEngineName = EngineKind.segmenter.rawValue
            activePrecision = .fp32
            return try SegmenterEngine(options: options)
        }
        var parameters = MatAnyone2Parameters()
        parameters.memEvery = Int(settings.memEvery)
        parameters.maxMemFrames = Int(settings.maxMemFrames)
        parameters.topK = Int(settings.topK)
        parameters.warmup = Int(settings.warmup)
        activeEngineName = EngineKind.matanyone2.rawValue
        activePrecision = options.precision
        return try MatAnyone2Engine(options: options, parameters: parameters,
                                    workingShortSide: Int(settings.workingSize), seed: try seedSource(settings, maskPath: nil))
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
        let current = snapshot()
        var source: SeedSource?
        if let maskPath {
            do {
                source = try seedSource(current, maskPath: maskPath)
            } catch {
                ErrorMapping.postWarning("reseed ignored the mask: \(error)", on: handle)
            }
        }
        reseedLock.lock()
        pendingReseed = .some(source)
        reseedLock.unlock()
    }

    private let reseedLock = NSLock()
    /// nil: nothing pending; .some(nil): reseed as configured; .some(source): reseed from source.
    private var pendingReseed: SeedSource??

    private func takePendingReseed() -> SeedSource?? {
        reseedLock.lock()
        defer { reseedLock.unlock() }
        let pending = pendingReseed
        pendingReseed = nil
        return pending
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
        let format = outputInfo.pointee.finfo.pointee.format
        switch format {
        case GST_VIDEO_FORMAT_GRAY8: output = .alpha
        case GST_VIDEO_FORMAT_BGRA: output = .composite(.bgra)
        case GST_VIDEO_FORMAT_RGBA: output = .composite(.rgba)
        default:
            ErrorMapping.postSettingsError("unsupported output format \(format.rawValue)", on: handle)
            return false
        }
        let width = Int(input.pointee.width), height = Int(input.pointee.height)
        guard width == Int(outputInfo.pointee.width), height == Int(outputInfo.pointee.height) else {
            ErrorMapping.postSettingsError("input and output sizes differ", on: handle)
            return false
        }
        alphaPlane = [UInt8](repeating: 0, count: width * height)
        // New caps: temporal state no longer applies (warmUp resets it). One run at the new size
        // warms the runtime up and gives the first latency estimate.
        guard let engine else { return false }
        do {
            warmUpMs = try engine.warmUp(width: width, height: height)
        } catch {
            ErrorMapping.postError(error, on: handle)
            return false
        }
        latency.reset()
        return true
    }

    // MARK: Events and queries

    /// Forgets temporal state (FLUSH_STOP, STREAM_START, DISCONT).
    func resetStream() {
        engine?.reset()
    }

    func countSubmitted() { framesSubmitted += 1 }

    /// Adjusts an answered LATENCY query by what this element really costs.
    func answerLatency(live: Bool, minimum: GstClockTime, maximum: GstClockTime) -> (GstClockTime, GstClockTime) {
        let ours = GstClockTime(latency.answer(fallbackMs: warmUpMs) * 1_000_000)
        let none = shim_clock_time_none()
        return (minimum + ours, maximum == none ? none : maximum + ours)
    }

    // MARK: Frames

    func transform(input: VideoFrameView, output destination: VideoFrameView) -> GstFlowReturn {
        guard let engine else { return GST_FLOW_NOT_NEGOTIATED }
        let current = snapshot()
        if input.isDiscont { engine.reset() }
        if let reseed = takePendingReseed() { engine.reseed(reseed) }
        let start = monotonicMs()
        report.clear()
        let frame = input.bgra
        do {
            switch output {
            case .alpha:
                try engine.matte(frame, into: destination.gray, report: &report)
            case let .composite(format):
                let width = frame.width, height = frame.height
                try alphaPlane.withUnsafeMutableBufferPointer { plane in
                    let alpha = GrayImage(base: plane.baseAddress!, width: width, height: height, stride: width)
                    try engine.matte(frame, into: alpha, report: &report)
                    let compositeStart = monotonicMs()
                    compositor.composite(frame: frame, alpha: alpha, output: destination.bytes,
                                         outputStride: destination.stride, format: format,
                                         background: current.background, color: current.backgroundColor)
                    report.postprocessMs += monotonicMs() - compositeStart
                }
            }
        } catch {
            ErrorMapping.postError(error, on: handle)
            return GST_FLOW_ERROR
        }
        framesProcessed += 1
        let totalMs = monotonicMs() - start
        // Seeding (the warm-up passes) happens once; it is reported as seed-ms, not as latency.
        if latency.add(totalMs - report.seedMs) { handle.postLatencyMessage() }
        if current.statsInterval > 0, framesProcessed % UInt(current.statsInterval) == 0 {
            postStats(pts: input.pts, totalMs: totalMs, engine: engine)
        }
        return GST_FLOW_OK
    }

    private func postStats(pts: GstClockTime, totalMs: Double, engine: MattingEngine) {
        let stats = gst_structure_new_empty("matanyone-stats")!
        shim_structure_set_uint64(stats, "frame", framesProcessed)
        shim_structure_set_uint64(stats, "pts", pts)
        shim_structure_set_string(stats, "engine", activeEngineName)
        shim_structure_set_string(stats, "precision", activePrecision.rawValue)
        shim_structure_set_double(stats, "preprocess-ms", report.preprocessMs)
        shim_structure_set_double(stats, "inference-ms", report.inferenceMs)
        shim_structure_set_double(stats, "postprocess-ms", report.postprocessMs)
        shim_structure_set_double(stats, "total-ms", totalMs)
        shim_structure_set_double(stats, "memory-ms", report.memoryMs)
        shim_structure_set_double(stats, "latency-ms", latency.currentMs)
        shim_structure_set_uint64(stats, "frames-dropped", framesSubmitted &- framesProcessed)
        shim_structure_set_boolean(stats, "seeded", report.seeded ? 1 : 0)
        shim_structure_set_uint(stats, "memory-frames", UInt32(report.memoryFrames))
        if report.seedMs > 0 { shim_structure_set_double(stats, "seed-ms", report.seedMs) }
        for (name, ms) in zip(engine.modelNames, report.modelMs) {
            shim_structure_set_double(stats, name + "-ms", ms)
        }
        handle.postElementMessage(stats)
    }
}
