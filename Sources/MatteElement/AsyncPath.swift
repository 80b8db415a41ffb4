import CGStreamer
import Foundation
import MatteEngine
import MattePixels

/// mode=async: a frame is handed to the inference thread (its buffer, not a copy), its motion
/// estimated, and queued; it leaves with the newest alpha (carried along the motion to it) from
/// `generateOutput`, from the release thread (async-delay > 0, which lives here) or in a drain.
/// Every step decides under this path's lock and works outside it; the threads meet through the
/// flags of `State` and that lock's condition (`Locked.wait`), never through a poll.
final class AsyncPath {
    /// Everything the streaming, release, inference and query threads share, under the path lock.
    struct State {
        var core = StreamCore()
        /// Set at `stop`: every waiter and the release thread give up.
        var stopped = false
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
        /// Sticky events (tags) that waited behind frames a flush forgot: a pad keeps its sticky
        /// events across a flush, so they still go on, before the next frame (or EOS).
        var stickyAfterFlush: [OwnedEvent] = []
        /// The inference thread failed (its error is on the bus): streaming stops.
        var failed = false
        // The release thread's flags.
        /// Something changed that may let a frame go sooner (a new frame, an alpha, a drain, the end
        /// of a renegotiation or a flush): the release thread looks again.
        var poked = false
        /// FLUSH_START to FLUSH_STOP: nothing leaves, waiters give up.
        var flushing = false
        /// A frame taken from the queue and not yet pushed (the queue alone does not say "all gone").
        var pushing = false
        /// The streaming thread renegotiates (or pushes sticky events, answers ALLOCATION): no frame
        /// is produced or pushed meanwhile, so that a frame is made and pushed under one set of caps.
        var renegotiating = false
        /// The flow of the last push that failed (not OK nor FLUSHING), for the streaming thread.
        var downstreamFlow: GstFlowReturn?
        /// A track reset counts up: frames queued before it are rendered without the motion of the
        /// old track (the renderer starts its motion over at a frame of a newer count).
        var track = 0
        /// The streaming thread's own (used outside the lock): alignment=motion's estimate of each
        /// new frame's motion, which travels to the renderer with the frame.
        var estimator: MotionCarry?
        /// The rendering thread's own (used outside the lock): the release thread with
        /// async-delay, else the streaming thread. Made for each size.
        var renderer: AsyncRenderer?

        /// Whether a release thread runs (async-delay > 0, after the first caps).
        var delayed: Bool { releaser != nil && !stopped }

        /// The flow of the last failed push (NOT_LINKED, EOS, an error downstream), taken once.
        mutating func takeDownstreamFlow() -> GstFlowReturn? {
            defer { downstreamFlow = nil }
            return downstreamFlow
        }

        /// Retires the inference thread and the releaser of the previous size, if any (the releaser
        /// ends itself: it sees it was retired); returns the thread to stop once the lock is
        /// released (it may be finishing an inference).
        mutating func retire() -> AsyncMatting? {
            defer { matting = nil }
            if let releaser {
                retired.append(releaser)
                poked = true
            }
            releaser = nil
            return matting
        }
    }

    /// A frame taken from the queue to leave, with what rendering it needs, read under the lock when
    /// it was taken (a later renegotiation replaces the renderer, not this one).
    struct Departing {
        let frame: QueuedFrame
        let alpha: AsyncMatting.Alpha?
        let renderer: AsyncRenderer
        let matting: AsyncMatting
        let output: NegotiatedOutput
    }

    unowned let filter: MatteFilter
    let engines: EngineSlot
    let state: Locked<State>
    private var handle: ElementHandle { filter.handle }

    init(filter: MatteFilter, engines: EngineSlot, waits: WaitClock) {
        self.filter = filter
        self.engines = engines
        state = Locked(State(), waits: waits)
    }

    /// Whether frames take this path (its inference thread runs: after the first caps); before,
    /// they take the base class's way, which has nothing to do in async mode.
    var isRunning: Bool { state.withLock { $0.matting != nil && !$0.stopped } }

    /// Where a reset or reseed goes: the inference thread once it runs, else the engine if made.
    var requestTarget: RequestTarget? {
        if let matting = state.withLock({ $0.matting }) { return .matting(matting) }
        return engines.loaded.map(RequestTarget.engine)
    }

    /// A new track: the gap rule forgets, the motion starts over (the estimator now, the renderer
    /// at the first frame of the new track).
    func forgetTrack() {
        state.withLock { state in
            state.core.gaps.forget()
            state.track += 1
            state.estimator?.reset()  // (the streaming thread's own, and this is that thread)
        }
    }

    // MARK: Lifecycle

    /// New caps: the same size keeps the track; another size hands the models' loading and warm-up
    /// to a new inference thread and returns at once (0), so that frames leave meanwhile. Decided
    /// under the lock; the previous size's thread is stopped, and the new ones started, after it.
    func negotiated(_ output: NegotiatedOutput, input: GstVideoInfo, settings current: Settings) -> SizeOutcome {
        let width = Int(input.width), height = Int(input.height)
        // A new size's planes and threads are made before the lock is taken (work outside it): caps
        // come on the streaming thread, the only one that changes the size, so the size read here
        // still holds when they are installed.
        let sameSize = state.withLock { state -> Bool in
            state.core.output = output
            state.inputInfo = input
            return state.core.size.map { $0 == (width, height) } ?? false
        }
        if sameSize { return .sameSize }
        let estimator = MotionCarry(frameWidth: width, frameHeight: height)  // (made whatever alignment says: it may be switched on while playing)
        let renderer = AsyncRenderer(width: width, height: height, noPersonAlpha: UInt8(current.noPersonAlpha))
        let maxHeld = MatteFilter.heldFrameBound(current, framesPerSecond: input.framesPerSecond)
        let matting = AsyncMatting(engines: engines, width: width, height: height, heldFrames: current.asyncDelay > 0 ? maxHeld : 0,
                                    element: handle)
        matting.onTrackEvents = { [handle] events, pts in
            for event in events { handle.postElementMessage(MatteFilter.reseededMessage(event, pts: GstClockTime(pts))) }
        }
        matting.onNotices = { [handle] notices in
            for notice in notices { ErrorMapping.post(notice, on: handle) }
        }
        let delayMs = Double(current.asyncDelay)
        // Held frames leave on their own deadline, from a thread of their own.
        let releaser = delayMs > 0 ? makeReleaser() : nil
        if releaser != nil { matting.onFinished = { [weak self] in self?.poke() } }
        // (update: the retired release thread, asleep with nothing to do, wakes and ends now.)
        let (previous, dropped) = state.update { state -> (AsyncMatting?, [QueuedFrame]) in
            state.maxHeld = maxHeld
            state.core.gaps.forget()
            let previous = state.retire()
            defer { state.queue.removeAll() }  // (frames of the old size left by a drain a flush cut short)
            state.core.size = (width, height)
            state.delayMs = delayMs
            state.track += 1
            state.estimator = estimator
            state.renderer = renderer
            state.matting = matting
            state.releaser = releaser
            return (previous, state.queue)
        }
        withExtendedLifetime(dropped) {}  // (their buffers go back upstream outside the lock)
        previous?.stop()
        matting.start()
        releaser?.start()
        return .started(warmUpMs: 0)
    }

    /// Ends the threads (at `stop`): waiters give up, the inference thread stops after its frame,
    /// every release thread ends and is waited for, outside the lock.
    func stop() {
        let (matting, releasers) = state.update { state -> (AsyncMatting?, [FrameReleaser]) in
            state.stopped = true
            let matting = state.retire()
            defer { state.retired.removeAll() }
            return (matting, state.retired)
        }
        matting?.stop()
        for releaser in releasers { releaser.join() }
    }

    /// Something changed that may let a frame go sooner: the release thread looks again.
    private func poke() { state.update { $0.poked = true } }

    // MARK: Entry

    /// Takes an input buffer (the reference passes to the queue) once there is room for it.
    func submit(_ buffer: UnsafeMutablePointer<GstBuffer>, arrivalMs: Double) -> GstFlowReturn {
        let owned = OwnedBuffer(taking: buffer)
        let delayed = state.withLock { $0.delayed }
        if delayed {
            // What went wrong downstream stops upstream; a full queue holds it back.
            if let flow = state.withLock({ $0.takeDownstreamFlow() }) { return flow }
            let room = state.wait { [handle] state -> Bool? in
                // (Failed: the queue was emptied; `enqueue` returns the error.)
                guard state.delayed, !state.failed else { return true }
                if state.flushing || handle.sourceIsFlushing { return false }
                return state.queue.count < state.maxHeld ? true : nil
            } ?? false
            guard room, !handle.sourceIsFlushing else { return GST_FLOW_FLUSHING }
        }
        // What the base class's own submit_input_buffer does first: renegotiate when downstream
        // asked (RECONFIGURE), before any output buffer is allocated (and never while the release
        // thread renders or pushes one: only then does upstream wait for that push, which a syncing
        // sink holds until the frame's time).
        let reconfigured = delayed ? (handle.sourceNeedsReconfigure ? exclusively { handle.reconfigure() } : true)
            : handle.reconfigure()
        guard reconfigured else { return handle.sourceIsFlushing ? GST_FLOW_FLUSHING : GST_FLOW_NOT_NEGOTIATED }
        pushStickyAfterFlush()
        let current = filter.snapshot()
        return handle.withMappedFrame(buffer, .input) { enqueue($0, buffer: owned, arrivalMs: arrivalMs, settings: current) }
            ?? failed("an input buffer could not be mapped as a frame of its caps (\(gst_buffer_get_size(buffer)) bytes): "
                      + "the upstream element produced an invalid buffer")
    }

    /// A frame's step failed: the ERROR goes on the bus (naming the step), then the flow stops. Every
    /// GST_FLOW_ERROR of this path that is the element's own comes through here or a `Post.error`.
    private func failed(_ what: String, file: String = #fileID, function: String = #function, line: Int = #line) -> GstFlowReturn {
        filter.deliver(.error(ElementError.streamFailed(what), file: file, function: function, line: line))
        return GST_FLOW_ERROR
    }

    /// Hands the frame to the inference thread (which keeps the newest), estimates its motion and
    /// queues it: only the queueing is under the lock.
    private func enqueue(_ input: VideoFrameView, buffer: OwnedBuffer, arrivalMs: Double, settings current: Settings) -> GstFlowReturn {
        var posts: [Post] = []
        defer { for post in posts { filter.deliver(post) } }
        var failed = false
        guard let (matting, info, estimator, track) = state.withLock({ state -> (AsyncMatting, GstVideoInfo, MotionCarry?, Int)? in
            failed = state.failed
            guard !failed, !state.stopped, let matting = state.matting else { return nil }
            return (matting, state.inputInfo, state.estimator, state.track)
        }) else { return failed ? GST_FLOW_ERROR : GST_FLOW_NOT_NEGOTIATED }
        if let problem = input.layoutProblem(bytesPerPixel: 4) {
            posts.append(.error(ElementError.streamFormat(problem)))
            return GST_FLOW_ERROR
        }
        // (Requests reach the inference thread before this frame does: its mailbox keeps the order.)
        let requests = filter.takeFrameRequests(pts: input.pts)
        RequestTarget.matting(matting).apply(seed: requests.seed, reseed: requests.reseed)
        let pts = UInt64(input.pts), frame = input.bgra
        matting.submit(buffer.retained(), info: info, pts: pts)
        var queued = QueuedFrame(buffer: buffer, pts: pts, arrivalMs: arrivalMs, track: track)
        if let estimator, estimator.frameWidth == frame.width, estimator.frameHeight == frame.height {
            if current.alignment == .motion {
                queued.motion = estimator.estimate(frame, pts: pts)
                queued.motionMs = estimator.lastMotionMs
            } else {
                estimator.reset()
            }
        }
        state.update { state in
            state.queue.append(queued)
            state.poked = true
        }
        return GST_FLOW_OK
    }

    /// The base class asks for output after each input: the next frame that may leave now, if any.
    /// (With async-delay, frames leave from the release thread, on their own deadline.)
    func generateOutput(_ output: UnsafeMutablePointer<UnsafeMutablePointer<GstBuffer>?>) -> GstFlowReturn {
        output.pointee = nil
        if !state.withLock({ $0.delayed }), let departing = releaseNext() { return produce(departing, into: output) }
        return state.withLock { $0.failed } ? GST_FLOW_ERROR : GST_FLOW_OK
    }

    // MARK: Events and queries

    /// FLUSH_START: nothing leaves and waiters give up until FLUSH_STOP.
    func flushStart() {
        state.update { state in if state.delayed { state.flushing = true } }
    }

    /// FLUSH_STOP: the held frames are forgotten (a push in progress ends first, while the pad still
    /// flushes: nothing from before the seek goes out after FLUSH_STOP), and so is a failed push.
    func flushStop() {
        exclusively { flushHeldFrames() }
        state.update { state in
            state.flushing = false
            state.downstreamFlow = nil
            state.poked = true
        }
    }

    /// EOS: the held frames leave first (a failure is on the bus; the event still goes on), then the
    /// sticky events a flush kept.
    func endOfStream() {
        if isRunning { _ = drainHeldFrames() }
        pushStickyAfterFlush()
    }

    /// New caps: frames of the old format leave first.
    func capsComing() {
        if isRunning { _ = drainHeldFrames() }
    }

    /// A serialized event the base class only forwards (a custom event, tags, a gap) keeps its place
    /// without holding up upstream: behind frames that are held it waits with them and goes on right
    /// after the last of them (the release thread pushes it; true: taken); with none held it goes on
    /// once the frame being pushed, if any, has gone (false).
    func holdOrWait(_ event: UnsafeMutablePointer<GstEvent>) -> Bool {
        let held = state.withLock { state -> Bool in
            guard state.delayed, !state.queue.isEmpty else { return false }
            state.queue[state.queue.count - 1].followingEvents.append(OwnedEvent(taking: event))
            return true
        }
        if held { return true }
        waitForHeldFrames()
        return false
    }

    /// An event the base class acts on (a segment, a new stream) keeps its place in the stream: the
    /// frames held before it leave first (each on its own deadline), then it goes on.
    func waitForHeldFrames() {
        guard state.withLock({ $0.delayed }) else { return }
        _ = state.wait { [handle] state -> Bool? in
            guard state.delayed, !state.flushing, !handle.sourceIsFlushing else { return true }
            return state.queue.isEmpty && !state.pushing ? true : nil
        }
    }

    /// A query, answered by the base class (`parent`): with a delay, DRAIN first lets every held
    /// frame go (upstream wants its buffers back), and ALLOCATION, on which the base class may
    /// renegotiate, never runs while the release thread renders or pushes a frame.
    func query(_ type: GstQueryType, parent: () -> Bool) -> Bool {
        guard state.withLock({ $0.delayed }) else { return parent() }
        if type == GST_QUERY_DRAIN { _ = drainHeldFrames() }
        return exclusively(parent)
    }

    /// Pushes every frame still held (EOS, new caps), after the inference thread finished what it
    /// holds (waiting at most the delay the frames would have waited anyway, and at least for one
    /// inference).
    private func drainHeldFrames() -> GstFlowReturn {
        guard let (matting, delay, delayed) = state.withLock({ state in state.matting.map { ($0, state.delayMs, state.delayed) } }) else {
            return GST_FLOW_OK
        }
        matting.waitIdle(timeoutMs: max(delay, 5000))
        if delayed {
            // The release thread lets everything go now; this thread waits until it did.
            state.update { state in
                state.draining = true
                state.poked = true
            }
            waitForHeldFrames()
            return state.withLock { state in
                state.draining = false
                return state.takeDownstreamFlow()
            } ?? GST_FLOW_OK
        }
        var released: [Departing] = []
        while let next = releaseNext(draining: true) { released.append(next) }
        for departing in released {
            var out: UnsafeMutablePointer<GstBuffer>?
            let flow = produce(departing, into: &out)
            guard flow == GST_FLOW_OK, let out else { return flow }
            let pushed = handle.push(out)
            guard pushed == GST_FLOW_OK else { return pushed }
        }
        return GST_FLOW_OK
    }

    /// Runs `body` while no frame is being produced or pushed (the streaming thread's renegotiation,
    /// an ALLOCATION query, sticky events): the release thread waits meanwhile. Without a release
    /// thread, `body` runs at once.
    private func exclusively<Result>(_ body: () -> Result) -> Result {
        let claimed = state.wait(counted: true) { state -> Bool? in
            guard state.delayed else { return false }
            if state.pushing || state.renegotiating { return nil }
            state.renegotiating = true
            return true
        } ?? false
        guard claimed else { return body() }
        defer {
            state.update { state in
                state.renegotiating = false
                state.poked = true
            }
        }
        return body()
    }

    /// Forgets the queued frames (FLUSH_STOP), and the events behind them except the sticky ones.
    private func flushHeldFrames() {
        let dropped = state.withLock { state -> [QueuedFrame] in
            defer { state.queue.removeAll() }
            state.stickyAfterFlush += state.queue.flatMap { $0.followingEvents.filter(\.outlivesFlush) }
            return state.queue
        }
        withExtendedLifetime(dropped) {}  // (the buffers go back upstream outside the lock)
    }

    /// The sticky events a flush kept (see `stickyAfterFlush`), sent on now: after the new segment,
    /// before the first frame or EOS after the flush.
    private func pushStickyAfterFlush() {
        let events = state.withLock { state -> [OwnedEvent] in
            defer { state.stickyAfterFlush = [] }
            return state.stickyAfterFlush
        }
        guard !events.isEmpty else { return }
        exclusively { for event in events { _ = handle.push(event) } }
    }

    // MARK: Departures

    /// A frame's own alpha is worth waiting for, even with async-delay=0, when inference takes less
    /// than this (ms): a quarter of a frame at 30 fps. A fast engine (the segmenter, ~5 ms) then gives
    /// every frame its own alpha at the input rate; a slow one (MatAnyone2) is never waited for.
    static let quickWaitMs = 8.0

    /// The next frame that may leave now (with the alpha to apply), or nil. `draining` releases
    /// everything (EOS, new caps). A quick engine's alpha is waited for outside the lock (without a
    /// release thread only this thread takes frames from the queue: the head stays the head).
    private func releaseNext(draining: Bool = false) -> Departing? {
        if !draining, let (matting, head, delay) = state.withLock({ state in
            state.matting.flatMap { matting in state.queue.first.map { (matting, $0.pts, state.delayMs) } }
        }), delay < AsyncPath.quickWaitMs, let typical = matting.medianInferenceMs, typical < AsyncPath.quickWaitMs {
            matting.waitForAlpha(of: head, timeoutMs: AsyncPath.quickWaitMs)
        }
        var posts: [Post] = []
        // (update: a departure changes the queue, which the threads waiting for room or for the held
        // frames to go look at. The frames a failure dropped are freed with `step`, after the lock.)
        let step = state.update { state in departure(&state, draining: draining, posts: &posts) }
        for post in posts { filter.deliver(post) }
        return step.departing
    }

    /// Whether the oldest held frame leaves now (taken from the queue, with the alpha to apply), or
    /// when it will (its delay over), or nothing is held, or inference failed: every held frame is
    /// dropped (taken from the queue, their buffers to be released once the lock is).
    private enum Departure {
        case leave(Departing)
        case waitUntil(Double)
        case none
        case failed(dropped: [QueuedFrame])

        var departing: Departing? {
            if case let .leave(departing) = self { return departing }
            return nil
        }
    }

    /// The departure rule, under the lock.
    private func departure(_ state: inout State, draining: Bool, posts: inout [Post]) -> Departure {
        guard !state.stopped, let matting = state.matting, let renderer = state.renderer, let head = state.queue.first else { return .none }
        let (alpha, ownComing, failure) = matting.closest(to: head.pts)
        if let failure {
            if !state.failed { posts.append(.error(failure)) }
            state.failed = true
            defer { state.queue = [] }
            return .failed(dropped: state.queue)
        }
        let waited = monotonicMs() - head.arrivalMs
        let ready: Bool
        if draining || state.delayMs == 0 || waited >= state.delayMs {
            ready = true
        } else if let alpha, alpha.pts == head.pts {
            ready = true  // its own alpha
        } else {
            // Not its own alpha coming: one from this frame's time or later is as close as any will be.
            ready = !ownComing && (alpha.map { $0.pts >= head.pts } ?? false)
        }
        guard ready else { return .waitUntil(head.arrivalMs + state.delayMs) }
        state.queue.removeFirst()
        if let next = state.queue.first { matting.forgetAlphas(before: next.pts) }
        return .leave(Departing(frame: head, alpha: alpha, renderer: renderer, matting: matting, output: state.core.output))
    }

    // MARK: The release thread

    /// The release thread (async-delay > 0): its decisions, taken under the lock, and its work
    /// (render, push), done outside it.
    private func makeReleaser() -> FrameReleaser {
        FrameReleaser(
            next: { [unowned self] releaser in
                var posts: [Post] = []
                var dropped: [QueuedFrame] = []  // (a failure's: released after the lock)
                defer { withExtendedLifetime(dropped) {} }
                // (update: a departure changes the queue, or empties it when inference failed, which
                // the streaming thread may be waiting on: room in the queue, the held frames gone.)
                let step = state.update { state -> FrameReleaser.Step in
                    guard !state.stopped, state.releaser === releaser else { return .retire }
                    state.poked = false
                    // (FLUSH_STOP forgets them; a renegotiation lets them go once it is over.)
                    if state.flushing || state.renegotiating { return .idle }
                    switch departure(&state, draining: state.draining, posts: &posts) {
                    case .none: return .idle
                    case let .failed(frames):
                        dropped = frames
                        return .idle
                    case let .waitUntil(ms): return .waitUntil(ms)
                    case let .leave(departing):
                        state.pushing = true
                        return .leave(departing)
                    }
                }
                for post in posts { filter.deliver(post) }
                return step
            },
            release: { [unowned self] departing in
                var out: UnsafeMutablePointer<GstBuffer>?
                let produced = produce(departing, into: &out)
                let flow = produced == GST_FLOW_OK ? out.map { handle.push($0) } ?? failed("a frame left without its output buffer") : produced
                for event in departing.frame.followingEvents { _ = handle.push(event) }
                return flow
            },
            pushed: { [unowned self] _, flow in
                state.update { state in
                    state.pushing = false
                    if flow != GST_FLOW_OK, flow != GST_FLOW_FLUSHING { state.downstreamFlow = flow }
                }
            },
            sleep: { [unowned self] releaser, deadlineMs in
                state.wait(deadlineMs: deadlineMs) { state -> Bool? in
                    guard !state.stopped, state.releaser === releaser else { return false }
                    return state.poked ? true : nil
                } ?? true
            })
    }

    // MARK: Rendering

    /// The output buffer of a released frame: allocated as the base class allocates its own
    /// (metadata and timestamps copied), written by `render`. The frame's motion reaches the
    /// renderer first, whatever becomes of the output.
    private func produce(_ departing: Departing, into output: UnsafeMutablePointer<UnsafeMutablePointer<GstBuffer>?>) -> GstFlowReturn {
        departing.renderer.admit(departing.frame, coming: departing.matting.inFlightPts)
        let input = departing.frame.buffer.buffer
        let (prepared, buffer) = handle.prepareOutputBuffer(for: input)
        if prepared == GST_FLOW_ERROR || (prepared == GST_FLOW_OK && buffer == nil) {
            if let buffer { gst_buffer_unref(buffer) }
            return failed("no output buffer could be allocated for a frame (the downstream pool or allocator failed)")
        }
        guard prepared == GST_FLOW_OK, let buffer else { return prepared }  // (FLUSHING, EOS…: not failures of ours)
        let outbuf = OwnedBuffer(taking: buffer)
        let flow = handle.withMappedFrame(input, .input) { frame in
            handle.withMappedFrame(buffer, .output) { out in render(input: frame, output: out, departing) }
                ?? failed("an output buffer (\(gst_buffer_get_size(buffer)) bytes) could not be mapped as a frame of the "
                          + "output caps: the downstream pool gave a buffer too small for them")
        } ?? failed("a held input buffer could not be mapped as a frame of its caps")
        guard flow == GST_FLOW_OK else { return flow }  // (outbuf released)
        output.pointee = outbuf.release()
        return GST_FLOW_OK
    }

    /// alignment=motion: `alpha` (of an older frame) carried along the motion to the frame at `pts`,
    /// written to the renderer's `carriedPlane`; nil (use the alpha as it is) for the frame's own
    /// alpha, an alpha of a later frame, or motion not known (a reset since, older than the motion kept).
    private func carry(alpha: AsyncMatting.Alpha, to pts: UInt64, renderer: AsyncRenderer, settings current: Settings) -> MotionCarry.Carried? {
        let carry = renderer.motion
        guard current.alignment == .motion, alpha.pts < pts,
              alpha.plane.count == carry.frameWidth * carry.frameHeight, renderer.carriedPlane.count == alpha.plane.count,
              carry.knows(from: alpha.pts, to: pts) else {
            return nil
        }
        if renderer.carrySource?.pts != alpha.pts {
            let small = GrayView.of(alpha.plane, width: carry.frameWidth, height: carry.frameHeight) { carry.carrySized($0) }
            renderer.carrySource = (alpha.pts, small)
        }
        let carried = renderer.carriedPlane.withUnsafeMutableBufferPointer {
            carry.carry(renderer.carrySource!.plane, from: alpha.pts, to: pts,
                        into: GrayImage(base: $0.baseAddress!, width: carry.frameWidth, height: carry.frameHeight, stride: carry.frameWidth))
        }
        DebugLog.log(GST_LEVEL_LOG, handle, "alpha of pts \(alpha.pts) carried \(carried?.frames ?? 0) frames to pts \(pts)")
        return carried
    }

    /// Writes the output of a released frame from its alpha (carried to it, or `no-person-alpha`
    /// before the first), read where it lies: no copy of the plane. No lock is held.
    private func render(input: VideoFrameView, output destination: VideoFrameView, _ departing: Departing) -> GstFlowReturn {
        var posts: [Post] = []
        defer { for post in posts { filter.deliver(post) } }
        let renderer = departing.renderer
        if let problem = input.layoutProblem(bytesPerPixel: 4)
            ?? destination.layoutProblem(bytesPerPixel: departing.output == .alpha ? 1 : 4) {
            posts.append(.error(ElementError.streamFormat(problem)))
            return GST_FLOW_ERROR
        }
        let start = monotonicMs()
        let current = filter.snapshot()
        let frame = input.bgra
        let usable = departing.alpha.flatMap { $0.plane.count == frame.width * frame.height ? $0 : nil }
        let carried = usable.flatMap { carry(alpha: $0, to: UInt64(input.pts), renderer: renderer, settings: current) }
        let plane = carried != nil ? renderer.carriedPlane : usable?.plane ?? renderer.noAlphaPlane
        GrayView.of(plane, width: frame.width, height: frame.height) { matte in
            filter.render(frame, alpha: matte, into: destination, output: departing.output, compositor: &renderer.compositor, settings: current)
        }
        // (The frame's cost includes its motion, estimated when it arrived.)
        let motionMs = departing.frame.motionMs
        let costMs = monotonicMs() - start + motionMs
        // The engine's figures are those of the alpha used (the inference thread's frame); the
        // element's own work is this frame's motion and compositing. (Its track events were posted
        // by the inference thread.)
        if let usable { renderer.report = usable.report } else {
            renderer.report.clear()
            renderer.report.seeded = false  // no alpha yet (models loading, no seed): nothing tracked
        }
        renderer.report.preprocessMs = 0
        renderer.report.postprocessMs = costMs
        renderer.report.inferenceMs = usable?.inferenceMs ?? 0
        let engine = engines.loaded
        let (counts, held) = state.withLock { state in
            (state.core.finishFrame(held: state.queue.count, engine: engine, isAsync: true), state.queue.count)
        }
        var end = MatteFilter.FrameEnd(pts: input.pts, costMs: costMs, report: renderer.report)
        let matting = departing.matting
        end.stats = { stats in
            if let usable { shim_structure_set_double(stats, "alpha-age-ms", (Double(input.pts) - Double(usable.pts)) / 1_000_000) }
            if current.alignment == .motion {
                shim_structure_set_double(stats, "motion-ms", motionMs)
                shim_structure_set_uint(stats, "carry-frames", UInt32(carried?.frames ?? 0))
                shim_structure_set_double(stats, "carry-pixels", carried?.meanPixels ?? 0)
            }
            shim_structure_set_double(stats, "inference-fps", matting.inferenceFPS)
            shim_structure_set_uint(stats, "frames-held", UInt32(held))
        }
        filter.endFrame(end, counts: counts, settings: current, posts: &posts)
        DebugLog.log(GST_LEVEL_LOG, handle, "async frame pts \(input.pts): alpha of pts \(usable.map { "\($0.pts)" } ?? "none"), "
                     + "\(costMs) ms")
        return GST_FLOW_OK
    }
}
