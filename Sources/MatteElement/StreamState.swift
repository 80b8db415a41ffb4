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

/// mode=sync: the alpha a composite is made from (GRAY8 output is written by the engine directly).
final class SyncPath {
    var alphaPlane: [UInt8] = []
}

/// mode=async: the inference thread, the frames waiting to leave, and what carries an older alpha
/// to a newer frame.
final class AsyncPath {
    /// The inference thread (which owns the engine while it runs), made for each negotiated size.
    var matting: AsyncMatting?
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
    /// The alpha of frames that leave before the first alpha exists (`no-person-alpha`).
    var noAlphaPlane: [UInt8] = []
    /// alignment=motion: the motion of the frames submitted, the newest alpha used at the carry
    /// size (made once per alpha), the plane a carried alpha is written to, and the motion's cost on
    /// the newest frame (ms).
    var carry: MotionCarry?
    var carrySource: (pts: UInt64, plane: [Float])?
    var carriedPlane: [UInt8] = []
    var motionMs = 0.0

    /// Forgets the motion and the alpha it carries (a new track, a flush).
    func forgetMotion() {
        carry?.reset()
        carrySource = nil
    }

    /// Stops the inference thread of the previous size, if any, and retires its releaser (which
    /// ends itself: it cannot be waited for under the stream lock, which it takes).
    func stopMatting() {
        matting?.stop()
        matting = nil
        if let releaser {
            retired.append(releaser)
            releaser.poke()  // (it sees it was retired and ends)
        }
        releaser = nil
    }

    /// Every release thread, ended and waited for (at `stop`, outside the stream lock).
    func stopReleasers() -> [FrameReleaser] {
        defer { retired.removeAll() }
        return retired + (releaser.map { [$0] } ?? [])
    }
}

/// A frame waiting to leave in async mode: its buffer (our reference), when it arrived, and the
/// serialized events that came after it while it was held (they leave right after it).
struct QueuedFrame {
    let buffer: OwnedBuffer
    let pts: UInt64
    let arrivalMs: Double
    var followingEvents: [OwnedEvent] = []
}

/// Per-stream state: created in `start`, completed in `setInfo` for the negotiated caps, dropped in
/// `stop`. Only reached under `MatteFilter.stream`'s lock.
final class StreamState {
    let engines: EngineSlot
    /// The engine, nil while the inference thread of async mode is still making it.
    var engine: MattingEngine? { engines.loaded }
    let path: FramePath
    var report: FrameReport
    var framesSubmitted: UInt = 0
    var framesProcessed: UInt = 0
    /// The buffers seen so far, for the gap rule.
    var gaps = GapRule()
    // Negotiated (setInfo).
    var output = NegotiatedOutput.alpha
    var size: (width: Int, height: Int)?
    var compositor = Compositor()

    init(engines: EngineSlot, mode: MatteMode) {
        self.engines = engines
        path = mode == .async ? .async(AsyncPath()) : .sync(SyncPath())
        report = FrameReport(modelCount: engines.loaded?.modelNames.count ?? 0)
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

    /// Hands what was asked for since the last frame to the engine, through the inference thread
    /// when it owns the engine: a seed mask set while playing, then a reseed.
    func apply(seed: SeedSource?, reseed: SeedSource??) {
        if let (_, matting) = running {
            if let seed { matting.replaceSeed(seed) }
            if let reseed { matting.reseed(reseed) }
        } else {
            if let seed { engine?.replaceSeed(seed) }
            if let reseed { engine?.reseed(reseed) }
        }
    }

    /// Resets the engine's track, through the inference thread when it owns the engine.
    func resetEngine() {
        if let (_, matting) = running { matting.reset() } else { engine?.reset() }
    }

    /// Resets the track and forgets the buffers seen (a new stream, a seek, new caps).
    func resetTrack() {
        resetEngine()
        gaps.forget()
        asyncPath?.forgetMotion()
    }
}
