import CGStreamer
import Foundation
import MatteEngine
import MattePixels

/// mode=async: a frame is handed to the inference thread (its buffer, not a copy), its motion
/// estimated, and queued; it leaves with the newest alpha (carried along the motion to it) from
/// `generateOutput`, from the release thread (async-delay > 0) or in a drain. Every step decides
/// under the path lock (`stream`) and works outside it; the threads meet through the path's flags
/// and that lock's condition (`Locked.wait`), never through a poll.
extension MatteFilter {
    /// A frame taken from the queue to leave, with what rendering it needs, read under the path lock
    /// when it was taken (a later renegotiation replaces the renderer, not this one).
    struct Departing {
        let frame: QueuedFrame
        let alpha: AsyncMatting.Alpha?
        let renderer: AsyncRenderer
        let matting: AsyncMatting
        let output: NegotiatedOutput
    }

    // MARK: Entry

    /// Takes an input buffer (the reference passes to the queue) once the path has room for it.
    func submitAsync(_ buffer: UnsafeMutablePointer<GstBuffer>, path: AsyncPath, arrivalMs: Double) -> GstFlowReturn {
        let owned = OwnedBuffer(taking: buffer)
        let delayed = stream.withLock { _ in path.releaser != nil }
        if delayed {
            // What went wrong downstream stops upstream; a full queue holds it back.
            if let flow = stream.withLock({ _ in path.takeDownstreamFlow() }) { return flow }
            let room = stream.wait(counted: false) { state -> Bool? in
                guard state?.asyncPath === path, path.releaser != nil else { return true }
                if path.flushing || handle.sourceIsFlushing { return false }
                return path.queue.count < path.maxHeld ? true : nil
            } ?? false
            guard room, !handle.sourceIsFlushing else { return GST_FLOW_FLUSHING }
        }
        // What the base class's own submit_input_buffer does first: renegotiate when downstream
        // asked (RECONFIGURE), before any output buffer is allocated (and never while the release
        // thread renders or pushes one: only then does upstream wait for that push, which a syncing
        // sink holds until the frame's time).
        let reconfigured = delayed ? (handle.sourceNeedsReconfigure ? exclusively(path) { handle.reconfigure() } : true)
            : handle.reconfigure()
        guard reconfigured else { return handle.sourceIsFlushing ? GST_FLOW_FLUSHING : GST_FLOW_NOT_NEGOTIATED }
        pushStickyAfterFlush(path)
        let current = snapshot()
        return handle.withMappedFrame(buffer, .input) { enqueue($0, buffer: owned, path: path, arrivalMs: arrivalMs, settings: current) }
            ?? GST_FLOW_ERROR
    }

    /// Hands the frame to the inference thread (which keeps the newest), estimates its motion and
    /// queues it: only the queueing is under the lock.
    private func enqueue(_ input: VideoFrameView, buffer: OwnedBuffer, path: AsyncPath, arrivalMs: Double,
                         settings current: Settings) -> GstFlowReturn {
        var posts: [Post] = []
        defer { for post in posts { deliver(post) } }
        var failed = false
        guard let (matting, info, estimator, track) = stream.withLock({ state -> (AsyncMatting, GstVideoInfo, MotionCarry?, Int)? in
            guard let state, let (running, matting) = state.running, running === path else { return nil }
            failed = path.failed
            return failed ? nil : (matting, path.inputInfo, path.estimator, path.track)
        }) else { return failed ? GST_FLOW_ERROR : GST_FLOW_NOT_NEGOTIATED }
        if let problem = input.layoutProblem(bytesPerPixel: 4) {
            posts.append(.error(ElementError.streamFormat(problem)))
            return GST_FLOW_ERROR
        }
        // (Requests reach the inference thread before this frame does: its mailbox keeps the order.)
        let requests = takeFrameRequests(pts: input.pts)
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
        stream.update { state in
            guard state?.asyncPath === path else { return }
            path.queue.append(queued)
            path.poked = true
        }
        return GST_FLOW_OK
    }

    /// The base class asks for output after each input: in async mode the next frame that may leave
    /// now, if any (else the base class's own, which calls `transform`).
    func generateOutput(_ output: UnsafeMutablePointer<UnsafeMutablePointer<GstBuffer>?>) -> GstFlowReturn {
        let entered = DispatchTime.now().uptimeNanoseconds
        defer { waits.addSubmit(Int(DispatchTime.now().uptimeNanoseconds - entered)) }
        guard let path = runningAsyncPath else { return handle.parentGenerateOutput(output) }
        output.pointee = nil
        // (With async-delay, frames leave from the release thread, on their own deadline.)
        if stream.withLock({ _ in path.releaser != nil }) { return failed(path) ? GST_FLOW_ERROR : GST_FLOW_OK }
        guard let departing = releaseNext(path) else { return failed(path) ? GST_FLOW_ERROR : GST_FLOW_OK }
        return produce(departing, into: output)
    }

    /// Whether the inference thread failed (its error is on the bus): streaming must stop.
    private func failed(_ path: AsyncPath) -> Bool { stream.withLock { _ in path.failed } }

    // MARK: Held frames and events

    /// Pushes every frame async mode still holds (EOS, new caps), after the inference thread finished
    /// what it holds (waiting at most the delay the frames would have waited anyway, and at least
    /// for one inference).
    func drainHeldFrames() -> GstFlowReturn {
        guard let (path, matting, delay, delayed) = stream.withLock({ state in
            state?.running.map { ($0.path, $0.matting, $0.path.delayMs, $0.path.releaser != nil) }
        }) else { return GST_FLOW_OK }
        matting.waitIdle(timeoutMs: max(delay, 5000))
        if delayed {
            // The release thread lets everything go now; this thread waits until it did.
            stream.update { _ in
                path.draining = true
                path.poked = true
            }
            waitUntilHeldFramesGone(path)
            return stream.withLock { _ in
                path.draining = false
                return path.takeDownstreamFlow()
            } ?? GST_FLOW_OK
        }
        var released: [Departing] = []
        while let next = releaseNext(path, draining: true) { released.append(next) }
        for departing in released {
            var out: UnsafeMutablePointer<GstBuffer>?
            let flow = produce(departing, into: &out)
            guard flow == GST_FLOW_OK, let out else { return flow }
            let pushed = handle.push(out)
            guard pushed == GST_FLOW_OK else { return pushed }
        }
        return GST_FLOW_OK
    }

    /// A serialized event the base class only forwards (a custom event, tags, a gap) keeps its place
    /// without holding up upstream: behind frames that are held it waits with them and goes on right
    /// after the last of them (the release thread pushes it); with none held it goes on now (false).
    func holdBehindFrames(_ event: UnsafeMutablePointer<GstEvent>) -> Bool {
        stream.withLock { state in
            guard let path = state?.asyncPath, path.releaser != nil, !path.queue.isEmpty else { return false }
            path.queue[path.queue.count - 1].followingEvents.append(OwnedEvent(taking: event))
            return true
        }
    }

    /// The async path with a release thread (async-delay > 0), else nil.
    var delayedPath: AsyncPath? {
        stream.withLock { state in state?.asyncPath.flatMap { $0.releaser != nil ? $0 : nil } }
    }

    /// An event the base class acts on (a segment, a new stream) keeps its place in the stream: the
    /// frames held before it leave first (each on its own deadline), then it goes on.
    func waitForHeldFrames() {
        if let path = delayedPath { waitUntilHeldFramesGone(path) }
    }

    /// Until no frame is held or being pushed (or the pad flushes, or the release thread is gone).
    private func waitUntilHeldFramesGone(_ path: AsyncPath) {
        _ = stream.wait(counted: false) { state -> Bool? in
            guard state?.asyncPath === path, path.releaser != nil else { return true }
            if path.flushing || handle.sourceIsFlushing { return true }
            return path.queue.isEmpty && !path.pushing ? true : nil
        }
    }

    /// FLUSH_START (true) to FLUSH_STOP (false): waiters give up, nothing leaves, a failed push from
    /// before the seek is forgotten.
    func setFlushing(_ path: AsyncPath, _ flushing: Bool) {
        stream.update { _ in
            path.flushing = flushing
            if !flushing {
                path.downstreamFlow = nil
                path.poked = true
            }
        }
    }

    /// Runs `body` while no frame is being produced or pushed (the streaming thread's renegotiation,
    /// an ALLOCATION query, sticky events): the release thread waits meanwhile. Without a release
    /// thread, `body` runs at once.
    func exclusively<Result>(_ path: AsyncPath, _ body: () -> Result) -> Result {
        let claimed = stream.wait(counted: true) { state -> Bool? in
            guard state?.asyncPath === path, path.releaser != nil else { return false }
            if path.pushing || path.renegotiating { return nil }
            path.renegotiating = true
            return true
        } ?? false
        guard claimed else { return body() }
        defer {
            stream.update { _ in
                path.renegotiating = false
                path.poked = true
            }
        }
        return body()
    }

    /// Forgets the queued frames (FLUSH_STOP), and the events behind them except the sticky ones.
    func flushHeldFrames(_ path: AsyncPath) {
        let dropped = stream.withLock { _ -> [QueuedFrame] in
            defer { path.queue.removeAll() }
            path.stickyAfterFlush += path.queue.flatMap { $0.followingEvents.filter(\.outlivesFlush) }
            return path.queue
        }
        withExtendedLifetime(dropped) {}  // (the buffers go back upstream outside the lock)
    }

    /// The sticky events a flush kept (see `stickyAfterFlush`), sent on now: after the new segment,
    /// before the first frame or EOS after the flush.
    func pushStickyAfterFlush(_ path: AsyncPath) {
        let events = stream.withLock { _ -> [OwnedEvent] in
            defer { path.stickyAfterFlush = [] }
            return path.stickyAfterFlush
        }
        guard !events.isEmpty else { return }
        exclusively(path) { for event in events { _ = handle.push(event) } }
    }

    // MARK: Departures

    /// A frame's own alpha is worth waiting for, even with async-delay=0, when inference takes less
    /// than this (ms): a quarter of a frame at 30 fps. A fast engine (the segmenter, ~5 ms) then gives
    /// every frame its own alpha at the input rate; a slow one (MatAnyone2) is never waited for.
    static let quickWaitMs = 8.0

    /// The next frame that may leave now (with the alpha to apply), or nil. `draining` releases
    /// everything (EOS, new caps). A quick engine's alpha is waited for outside the lock (only this
    /// thread takes frames from the queue without a release thread: the head stays the head).
    private func releaseNext(_ path: AsyncPath, draining: Bool = false) -> Departing? {
        if !draining, let (matting, head, delay) = stream.withLock({ _ in
            path.matting.flatMap { matting in path.queue.first.map { (matting, $0.pts, path.delayMs) } }
        }), delay < MatteFilter.quickWaitMs, let typical = matting.medianInferenceMs, typical < MatteFilter.quickWaitMs {
            matting.waitForAlpha(of: head, timeoutMs: MatteFilter.quickWaitMs)
        }
        var posts: [Post] = []
        let next = stream.withLock { state -> Departing? in
            guard let state, state.asyncPath === path else { return nil }
            return departure(state: state, draining: draining, posts: &posts).departing
        }
        for post in posts { deliver(post) }
        return next
    }

    /// Whether the oldest held frame leaves now (taken from the queue, with the alpha to apply), or
    /// when it will (its delay over), or nothing is held.
    private enum Departure {
        case leave(Departing)
        case waitUntil(Double)
        case none

        var departing: Departing? {
            if case let .leave(departing) = self { return departing }
            return nil
        }
    }

    /// The departure rule, under the path lock.
    private func departure(state: StreamState, draining: Bool, posts: inout [Post]) -> Departure {
        guard let (path, matting) = state.running, let renderer = path.renderer, let head = path.queue.first else { return .none }
        let (alpha, ownComing, failure) = matting.closest(to: head.pts)
        if let failure {
            if !path.failed { posts.append(.error(failure)) }
            path.failed = true
            path.queue.removeAll()
            return .none
        }
        let waited = monotonicMs() - head.arrivalMs
        let ready: Bool
        if draining || path.delayMs == 0 || waited >= path.delayMs {
            ready = true
        } else if let alpha, alpha.pts == head.pts {
            ready = true  // its own alpha
        } else {
            // Not its own alpha coming: one from this frame's time or later is as close as any will be.
            ready = !ownComing && (alpha.map { $0.pts >= head.pts } ?? false)
        }
        guard ready else { return .waitUntil(head.arrivalMs + path.delayMs) }
        path.queue.removeFirst()
        return .leave(Departing(frame: head, alpha: alpha, renderer: renderer, matting: matting, output: state.output))
    }

    // MARK: The release thread

    /// The release thread of `path` (async-delay > 0): its decisions, taken under the path lock, and
    /// its work (render, push), done outside it.
    func makeReleaser(for path: AsyncPath) -> FrameReleaser {
        FrameReleaser(
            next: { [unowned self] releaser in
                var posts: [Post] = []
                let step = stream.withLock { state -> FrameReleaser.Step in
                    guard let state, state.asyncPath === path, path.releaser === releaser else { return .retire }
                    path.poked = false
                    // (FLUSH_STOP forgets them; a renegotiation lets them go once it is over.)
                    if path.flushing || path.renegotiating { return .idle }
                    switch departure(state: state, draining: path.draining, posts: &posts) {
                    case .none: return .idle
                    case let .waitUntil(ms): return .waitUntil(ms)
                    case let .leave(departing):
                        path.pushing = true
                        return .leave(departing)
                    }
                }
                for post in posts { deliver(post) }
                return step
            },
            release: { [unowned self] departing in
                var out: UnsafeMutablePointer<GstBuffer>?
                let produced = produce(departing, into: &out)
                let flow = produced == GST_FLOW_OK ? out.map { handle.push($0) } ?? GST_FLOW_ERROR : produced
                for event in departing.frame.followingEvents { _ = handle.push(event) }
                return flow
            },
            pushed: { [unowned self] _, flow in
                stream.update { _ in
                    path.pushing = false
                    if flow != GST_FLOW_OK, flow != GST_FLOW_FLUSHING { path.downstreamFlow = flow }
                }
            },
            sleep: { [unowned self] releaser, deadlineMs in
                stream.wait(deadlineMs: deadlineMs) { state -> Bool? in
                    guard state?.asyncPath === path, path.releaser === releaser else { return false }
                    return path.poked ? true : nil
                } ?? true
            })
    }

    // MARK: Rendering

    /// The output buffer of a released frame: allocated as the base class allocates its own
    /// (metadata and timestamps copied), written by `renderHeld`. The frame's motion reaches the
    /// renderer first, whatever becomes of the output.
    private func produce(_ departing: Departing, into output: UnsafeMutablePointer<UnsafeMutablePointer<GstBuffer>?>) -> GstFlowReturn {
        departing.renderer.admit(departing.frame, coming: departing.matting.inFlightPts)
        let input = departing.frame.buffer.buffer
        let (prepared, buffer) = handle.prepareOutputBuffer(for: input)
        guard prepared == GST_FLOW_OK, let buffer else { return prepared == GST_FLOW_OK ? GST_FLOW_ERROR : prepared }
        let outbuf = OwnedBuffer(taking: buffer)
        let flow = handle.withMappedFrame(input, .input) { frame in
            handle.withMappedFrame(buffer, .output) { out in renderHeld(input: frame, output: out, departing) } ?? GST_FLOW_ERROR
        } ?? GST_FLOW_ERROR
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
    private func renderHeld(input: VideoFrameView, output destination: VideoFrameView, _ departing: Departing) -> GstFlowReturn {
        var posts: [Post] = []
        defer { for post in posts { deliver(post) } }
        let renderer = departing.renderer
        if let problem = input.layoutProblem(bytesPerPixel: 4)
            ?? destination.layoutProblem(bytesPerPixel: departing.output == .alpha ? 1 : 4) {
            posts.append(.error(ElementError.streamFormat(problem)))
            return GST_FLOW_ERROR
        }
        let start = monotonicMs()
        let current = snapshot()
        let frame = input.bgra
        let usable = departing.alpha.flatMap { $0.plane.count == frame.width * frame.height ? $0 : nil }
        let carried = usable.flatMap { carry(alpha: $0, to: UInt64(input.pts), renderer: renderer, settings: current) }
        let plane = carried != nil ? renderer.carriedPlane : usable?.plane ?? renderer.noAlphaPlane
        GrayView.of(plane, width: frame.width, height: frame.height) { matte in
            render(frame, alpha: matte, into: destination, output: departing.output, compositor: &renderer.compositor, settings: current)
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
        var end = FrameEnd(pts: input.pts, costMs: costMs, report: renderer.report)
        let matting = departing.matting
        end.stats = { [self] stats in
            if let usable { shim_structure_set_double(stats, "alpha-age-ms", (Double(input.pts) - Double(usable.pts)) / 1_000_000) }
            if current.alignment == .motion {
                shim_structure_set_double(stats, "motion-ms", motionMs)
                shim_structure_set_uint(stats, "carry-frames", UInt32(carried?.frames ?? 0))
                shim_structure_set_double(stats, "carry-pixels", carried?.meanPixels ?? 0)
            }
            shim_structure_set_double(stats, "inference-fps", matting.inferenceFPS)
            shim_structure_set_uint(stats, "frames-held", UInt32(stream.withLock { $0?.framesHeld ?? 0 }))
        }
        endFrame(end, settings: current, posts: &posts)
        DebugLog.log(GST_LEVEL_LOG, handle, "async frame pts \(input.pts): alpha of pts \(usable.map { "\($0.pts)" } ?? "none"), "
                     + "\(costMs) ms")
        return GST_FLOW_OK
    }
}

extension AsyncPath {
    /// The flow of the last failed push (NOT_LINKED, EOS, an error downstream), taken once. Under
    /// the path lock.
    func takeDownstreamFlow() -> GstFlowReturn? {
        defer { downstreamFlow = nil }
        return downstreamFlow
    }
}
