import CGStreamer
import Foundation
import MatteEngine
import MattePixels

/// What the source pad carries after negotiation.
enum NegotiatedOutput: Equatable {
    case alpha
    case composite(CompositeFormat)
}

/// What every path keeps of its stream, under the path's own lock: the buffers counted, the gap
/// rule, and what was negotiated.
struct StreamCore {
    var framesSubmitted: UInt = 0
    var framesProcessed: UInt = 0
    /// The buffers seen so far, for the gap rule.
    var gaps = GapRule()
    var output = NegotiatedOutput.alpha
    var size: (width: Int, height: Int)?
}

/// The counters a frame's end reads under its path's lock, for its stats.
struct FrameCounts {
    let processed: UInt
    let submitted: UInt
    let held: Int
    let engine: MattingEngine?
    let isAsync: Bool
}

/// How frames go through the element, chosen at `start` by `mode` (a READY-only property): each path
/// owns its state behind its own lock and answers the per-vfunc calls of its mode; `MatteFilter`
/// asks which path runs once per vfunc and keeps negotiation, properties and the reset policy.
enum FramePath {
    /// Every frame waits for its own alpha, made on the streaming thread (`transform`).
    case sync(SyncPath)
    /// Inference on a thread of its own; frames are queued and leave with the newest alpha.
    case async(AsyncPath)

    /// The state every path keeps, under the path's lock.
    func withCore<Result>(_ body: (inout StreamCore) -> Result) -> Result {
        switch self {
        case let .sync(path): return path.state.withLock { body(&$0.core) }
        case let .async(path): return path.state.withLock { body(&$0.core) }
        }
    }

    /// Where a reset or a reseed goes now: the inference thread while it owns the engine, else the
    /// engine (nil before it exists). Acted on outside the lock.
    var requestTarget: RequestTarget? {
        switch self {
        case let .sync(path): return path.engines.loaded.map(RequestTarget.engine)
        case let .async(path): return path.requestTarget
        }
    }

    /// Forgets the buffers seen and starts a new motion track (a new stream, a seek); the engine's
    /// reset goes to `requestTarget`.
    func forgetTrack() {
        switch self {
        case let .sync(path): path.state.withLock { $0.core.gaps.forget() }
        case let .async(path): path.forgetTrack()
        }
    }
}

/// The engine, or the inference thread that owns it, for a reset or reseed.
enum RequestTarget {
    case engine(MattingEngine)
    case matting(AsyncMatting)

    func apply(seed: SeedSource?, reseed: SeedSource??) {
        switch self {
        case let .matting(matting):
            if let seed { matting.replaceSeed(seed) }
            if let reseed { matting.reseed(reseed) }
        case let .engine(engine):
            if let seed { engine.replaceSeed(seed) }
            if let reseed { engine.reseed(reseed) }
        }
    }

    func reset() {
        switch self {
        case let .matting(matting): matting.reset()
        case let .engine(engine): engine.reset()
        }
    }
}

/// mode=sync: every frame's alpha made on the streaming thread, in `transform`. Its lock guards
/// only what other threads read (`StreamCore`); the engine, the alpha plane, the compositor and
/// the engine's report are the streaming thread's, used outside the lock (only that thread runs
/// `transform`, negotiation and the serialized events that reset or reseed).
final class SyncPath {
    struct State {
        var core = StreamCore()
    }

    unowned let filter: MatteFilter
    let engines: EngineSlot
    let state: Locked<State>
    // The streaming thread's own.
    private var alphaPlane: [UInt8] = []
    private var compositor = Compositor()
    private var report: FrameReport

    init(filter: MatteFilter, engines: EngineSlot, waits: WaitClock) {
        self.filter = filter
        self.engines = engines
        state = Locked(State(), waits: waits)
        report = FrameReport(modelCount: engines.loaded?.modelNames.count ?? 0)
    }

    /// New caps: the same size keeps the track; another size warms the engine up at it now (warmUp
    /// resets it; one run gives the first latency estimate, in ms), after the lock.
    func negotiated(_ output: NegotiatedOutput, width: Int, height: Int) -> SizeOutcome {
        let same = state.withLock { state -> Bool in
            state.core.output = output
            if let size = state.core.size, size == (width, height) { return true }
            state.core.size = nil
            state.core.gaps.forget()
            return false
        }
        if same { return .sameSize }
        alphaPlane = [UInt8](repeating: 0, count: width * height)
        do {
            let ms = try engines.get().warmUp(width: width, height: height)
            state.withLock { $0.core.size = (width, height) }
            return .started(warmUpMs: ms)
        } catch {
            return .failed(error)
        }
    }

    /// The frame's own alpha, made now, and its output.
    func transform(input: VideoFrameView, output destination: VideoFrameView) -> GstFlowReturn {
        var posts: [Post] = []
        defer { for post in posts { filter.deliver(post) } }
        let output = state.withLock { $0.core.output }
        guard let engine = engines.loaded else { return GST_FLOW_NOT_NEGOTIATED }
        if let problem = input.layoutProblem(bytesPerPixel: 4) ?? destination.layoutProblem(bytesPerPixel: output == .alpha ? 1 : 4) {
            posts.append(.error(ElementError.streamFormat(problem)))
            return GST_FLOW_ERROR
        }
        let requests = filter.takeFrameRequests(pts: input.pts)
        RequestTarget.engine(engine).apply(seed: requests.seed, reseed: requests.reseed)
        let current = filter.snapshot()
        let start = monotonicMs()
        report.clear()
        let frame = input.bgra
        do {
            switch output {
            case .alpha:
                try engine.matte(frame, into: destination.gray, report: &report)
            case .composite:
                try alphaPlane.withUnsafeMutableBufferPointer { plane in
                    let alpha = GrayImage(base: plane.baseAddress!, width: frame.width, height: frame.height, stride: frame.width)
                    try engine.matte(frame, into: alpha, report: &report)
                }
                let compositeStart = monotonicMs()
                GrayView.of(alphaPlane, width: frame.width, height: frame.height) { alpha in
                    filter.render(frame, alpha: alpha, into: destination, output: output, compositor: &compositor, settings: current)
                }
                report.postprocessMs += monotonicMs() - compositeStart
            }
        } catch {
            posts += report.notices.map(Post.notice)
            posts.append(.error(error))
            return GST_FLOW_ERROR
        }
        posts += report.notices.map(Post.notice)
        let totalMs = monotonicMs() - start
        let counts = state.withLock { state in
            state.core.finishFrame(held: 0, engine: engine, isAsync: false)
        }
        // Seeding (the warm-up passes) happens once; it is reported as seed-ms, and that frame is no
        // sample of what a frame costs.
        filter.endFrame(MatteFilter.FrameEnd(pts: input.pts, costMs: totalMs, isLatencySample: !(report.seedMs > 0),
                                             events: report.events, report: report),
                        counts: counts, settings: current, posts: &posts)
        DebugLog.log(GST_LEVEL_LOG, filter.handle, "frame \(counts.processed) pts \(input.pts): \(totalMs) ms, "
                     + "seeded \(report.seeded), memory frames \(report.memoryFrames)")
        return GST_FLOW_OK
    }
}

extension StreamCore {
    /// A frame left: counted, and the gap rule told when the element was done with it.
    mutating func finishFrame(held: Int, engine: MattingEngine?, isAsync: Bool) -> FrameCounts {
        framesProcessed += 1
        gaps.finished(atMs: monotonicMs())
        return FrameCounts(processed: framesProcessed, submitted: framesSubmitted, held: held, engine: engine, isAsync: isAsync)
    }
}

/// What new caps did to the stream (`setInfo`).
enum SizeOutcome {
    /// The size the track runs at: it continues.
    case sameSize
    /// A new size, its models warmed up in this long (0: async, the inference thread will).
    case started(warmUpMs: Double)
    case failed(Error)
}

/// What renders the frames of async mode, used by one thread at a time outside the path lock (the
/// release thread with async-delay, else the streaming thread): the motion of the frames that left
/// (each frame brings its own step), the newest alpha used at the carry size (made once per alpha),
/// the plane a carried alpha is written to, the `no-person-alpha` plane, the compositor and the
/// report of the alpha last used.
final class AsyncRenderer {
    let motion: MotionCarry
    var track = 0
    var carrySource: (pts: UInt64, plane: [Float])?
    var carriedPlane: [UInt8]
    let noAlphaPlane: [UInt8]
    var compositor = Compositor()
    /// The report of the alpha last used (the stats of a frame without one keep its models, zeroed).
    var report = FrameReport(modelCount: 0)

    init(width: Int, height: Int, noPersonAlpha: UInt8) {
        motion = MotionCarry(frameWidth: width, frameHeight: height)
        carriedPlane = [UInt8](repeating: 0, count: width * height)
        noAlphaPlane = [UInt8](repeating: noPersonAlpha, count: width * height)
    }

    /// Takes in a leaving frame's motion: the motion starts over at a new track, or when the frame
    /// has none (alignment is not motion); `coming` is the frame under inference, whose alpha the
    /// motion follows from now on.
    func admit(_ frame: QueuedFrame, coming: UInt64?) {
        if frame.track != track {
            track = frame.track
            motion.reset()
            carrySource = nil
        }
        guard let step = frame.motion else {
            motion.reset()
            carrySource = nil
            return
        }
        motion.insert(step)
        if let coming { motion.follow(from: coming) }
    }
}

/// A frame waiting to leave in async mode: its buffer (our reference), when it arrived, its motion
/// back to the frame before (alignment=motion) and what estimating it cost, the track it belongs
/// to, and the serialized events that came after it while it was held (they leave right after it).
struct QueuedFrame {
    let buffer: OwnedBuffer
    let pts: UInt64
    let arrivalMs: Double
    var motion: MotionStep?
    var motionMs = 0.0
    var track = 0
    var followingEvents: [OwnedEvent] = []
}
