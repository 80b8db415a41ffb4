import CGStreamer
import Foundation
import MatteEngine
import MattePixels

/// What the source pad carries after negotiation.
enum NegotiatedOutput: Equatable {
    case alpha
    case composite(CompositeFormat)
}

/// How frames go through the element, chosen at `start` by `mode` (a READY-only property): each
/// path owns only its own buffers and steps.
enum FramePath {
    /// Every frame waits for its own alpha, made on the streaming thread (`transform`).
    case sync(SyncPath)
    /// Inference on a thread of its own; frames are queued and leave with the newest alpha.
    case async(AsyncPath)
}

/// mode=sync: what the streaming thread works with, outside the path lock (only that thread runs
/// `transform`, and the base class calls it nowhere else): the alpha a composite is made from (GRAY8
/// output is written by the engine directly), the compositor and the engine's report of the frame.
final class SyncPath {
    var alphaPlane: [UInt8] = []
    var compositor = Compositor()
    var report: FrameReport

    init(modelCount: Int) { report = FrameReport(modelCount: modelCount) }
}

/// mode=async: the inference thread, the frames waiting to leave and the release thread's flags,
/// guarded by the path lock (`MatteFilter.stream`); what the streaming thread and the rendering
/// thread each work with outside the lock hangs off it (`estimator`, `renderer`).
final class AsyncPath {
    /// The inference thread (which owns the engine while it runs), made for each negotiated size.
    var matting: AsyncMatting?
    /// The negotiated input, for the inference thread's read-only map of a frame.
    var inputInfo = GstVideoInfo()
    var queue: [QueuedFrame] = []
    var delayMs = 0.0
    /// async-delay > 0: the thread that lets frames go on their own deadline, and the bound on
    /// the queue (`async-max-frames`). Releasers of earlier sizes, retired, are joined at `stop`.
    var releaser: FrameReleaser?
    var retired: [FrameReleaser] = []
    var maxHeld = 1
    /// EOS or new caps: every held frame leaves now, whatever its deadline.
    var draining = false
    /// Sticky events (tags) that waited behind frames a flush forgot: a pad keeps its sticky events
    /// across a flush, so they still go on, before the next frame (or EOS).
    var stickyAfterFlush: [OwnedEvent] = []
    /// The inference thread failed (its error is on the bus): streaming stops.
    var failed = false
    // The release thread's flags (see FrameReleaser).
    /// Something changed that may let a frame go sooner (a new frame, an alpha, a drain, the end of
    /// a renegotiation or a flush): the release thread looks again.
    var poked = false
    /// FLUSH_START to FLUSH_STOP: nothing leaves, waiters give up.
    var flushing = false
    /// A frame taken from the queue and not yet pushed (the queue alone does not say "all gone").
    var pushing = false
    /// The streaming thread renegotiates (or pushes sticky events, answers ALLOCATION): no frame is
    /// produced or pushed meanwhile, so that a frame is made and pushed under one set of caps.
    var renegotiating = false
    /// The flow of the last push that failed (not OK nor FLUSHING), for the streaming thread.
    var downstreamFlow: GstFlowReturn?
    /// A track reset counts up: frames queued before it are rendered without the motion of the old
    /// track (the renderer starts its motion over at a frame of a newer count).
    var track = 0
    /// The streaming thread's own (outside the lock): alignment=motion's estimate of each new frame's
    /// motion, which travels to the renderer with the frame.
    var estimator: MotionCarry?
    /// The rendering thread's own (outside the lock): the release thread with async-delay, else the
    /// streaming thread. Made for each size.
    var renderer: AsyncRenderer?

    /// Stops the inference thread of the previous size, if any, and retires its releaser (which
    /// ends itself: it is not waited for under the path lock, which it takes); returns the thread to
    /// stop, for the caller to stop once the lock is released (it may be finishing an inference).
    func retire() -> AsyncMatting? {
        defer { matting = nil }
        if let releaser {
            retired.append(releaser)
            poked = true  // (it sees it was retired and ends)
        }
        releaser = nil
        return matting
    }

    /// Every release thread, to end and wait for (at `stop`, outside the path lock).
    func stopReleasers() -> [FrameReleaser] {
        defer { retired.removeAll() }
        return retired + (releaser.map { [$0] } ?? [])
    }
}

/// What renders the frames of async mode, used by one thread at a time outside the path lock (the
/// release thread with async-delay, else the streaming thread): the motion of the frames that left
/// (each frame brings its own step), the newest alpha used at the carry size (made once per alpha),
/// the plane a carried alpha is written to, the `no-person-alpha` plane and the compositor.
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

/// Per-stream state: created in `start`, completed in `setInfo` for the negotiated caps, dropped in
/// `stop`. Only reached under `MatteFilter.stream`'s lock (the path lock); the objects a path
/// works with outside it are named in SyncPath and AsyncPath.
final class StreamState {
    let engines: EngineSlot
    /// The engine, nil while the inference thread of async mode is still making it.
    var engine: MattingEngine? { engines.loaded }
    let path: FramePath
    var framesSubmitted: UInt = 0
    var framesProcessed: UInt = 0
    /// The buffers seen so far, for the gap rule.
    var gaps = GapRule()
    // Negotiated (setInfo).
    var output = NegotiatedOutput.alpha
    var size: (width: Int, height: Int)?

    init(engines: EngineSlot, mode: MatteMode) {
        self.engines = engines
        path = mode == .async ? .async(AsyncPath()) : .sync(SyncPath(modelCount: engines.loaded?.modelNames.count ?? 0))
    }

    /// The async path once its inference thread runs (after the first caps), else nil: frames then
    /// take the base class's way (`transform`).
    var running: (path: AsyncPath, matting: AsyncMatting)? {
        guard case let .async(path) = path, let matting = path.matting else { return nil }
        return (path, matting)
    }

    var asyncPath: AsyncPath? {
        if case let .async(path) = path { return path }
        return nil
    }

    /// Frames held in async mode, not yet gone (neither processed nor dropped).
    var framesHeld: Int { asyncPath?.queue.count ?? 0 }

    /// Where what was asked for since the last frame goes (a seed mask set while playing, a reseed,
    /// a reset): the inference thread while it owns the engine, else the engine. Called under the
    /// path lock, acted on after it (the engine's own calls are model-free but not lock-free).
    var requestTarget: RequestTarget? {
        if let (_, matting) = running { return .matting(matting) }
        return engine.map(RequestTarget.engine)
    }

    /// Forgets the buffers seen and starts a new motion track (a new stream, a seek, new caps);
    /// the engine's reset goes to `requestTarget`.
    func forgetTrack() {
        gaps.forget()
        if let path = asyncPath {
            path.track += 1
            path.estimator?.reset()
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
