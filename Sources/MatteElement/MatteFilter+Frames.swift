import CGStreamer
import Foundation
import MatteEngine
import MattePixels

/// A frame's journey through the element. Every buffer enters through `submit`; in sync mode the
/// base class then calls `transform`, in async mode it is queued and leaves through `generateOutput`
/// (or a drain). Whatever the path, a frame begins in `beginFrame` (its planes checked, pending seed
/// requests applied) and ends in `endFrame` (counters, gap rule, latency sample, track events,
/// stats), and its output is written by `render` (the alpha or the composite).
extension MatteFilter {
    // MARK: Entry

    /// Every input buffer (the reference passes to the element): counted and judged by the gap rule,
    /// then queued (async), dropped before any work (predictive QoS) or handed to the base class.
    func submit(_ buffer: UnsafeMutablePointer<GstBuffer>?, isDiscont: gboolean) -> GstFlowReturn {
        guard let buffer else { return handle.parentSubmitInputBuffer(buffer, isDiscont: isDiscont) }
        // When the frame came: what may hold it up below (room in the queue, a push in progress,
        // the motion) must not push its async-delay deadline later.
        let arrivalMs = monotonicMs()
        // One clock reading per buffer, for the gap rule and predictive QoS alike.
        let timing = handle.liveTiming(of: buffer)
        arrived(handle.arrival(of: buffer, timing: timing), pts: buffer.pointee.pts)
        watchBacklog(timing)
        awaitReseedMask()
        if isAsync {
            let owned = OwnedBuffer(taking: buffer)
            let releaser = heldFrameReleaser
            if let releaser {
                // What went wrong downstream stops upstream; a full queue holds it back.
                if let flow = releaser.takeDownstreamFlow() { return flow }
                let room = releaser.waitUntil {
                    handle.sourceIsFlushing || stream.withLock { state in state.map { $0.framesHeld < ($0.asyncPath?.maxHeld ?? 1) } ?? true }
                }
                guard room, !handle.sourceIsFlushing else { return GST_FLOW_FLUSHING }
            }
            // What the base class's own submit_input_buffer does first: renegotiate when downstream
            // asked (RECONFIGURE), before any output buffer is allocated (and never while the
            // release thread renders or pushes one: only then does upstream wait for that push,
            // which a syncing sink holds until the frame's time).
            let reconfigured = releaser.map { releaser in
                handle.sourceNeedsReconfigure ? releaser.exclusively { handle.reconfigure() } : true
            } ?? handle.reconfigure()
            guard reconfigured else { return handle.sourceIsFlushing ? GST_FLOW_FLUSHING : GST_FLOW_NOT_NEGOTIATED }
            pushStickyAfterFlush()
            let flow = handle.withMappedFrame(buffer, .input) { submitAsync($0, buffer: owned, arrivalMs: arrivalMs) } ?? GST_FLOW_ERROR
            releaser?.poke()
            return flow
        }
        if handle.qosEnabled, let timing, let late = lateness(runningTime: timing.runningTime, now: timing.now) {
            handle.postDropped(buffer, runningTime: timing.runningTime, late: late, counts: frameCounts)
            _ = OwnedBuffer(taking: buffer)  // (released: the frame is gone)
            return shim_flow_dropped()
        }
        return handle.parentSubmitInputBuffer(buffer, isDiscont: isDiscont)
    }

    /// Whether frames take the async path now (its inference thread runs: after the first caps).
    var isAsync: Bool { stream.withLock { $0?.running != nil } }

    /// async-delay > 0: the thread that lets held frames go.
    var heldFrameReleaser: FrameReleaser? { stream.withLock { $0?.asyncPath?.releaser } }

    /// Whether the inference thread failed (its error is on the bus): streaming must stop.
    var asyncFailed: Bool { stream.withLock { $0?.asyncPath?.failed ?? false } }

    // MARK: Beginning and end

    /// A frame's beginning, whichever the path: its planes hold what the caps say, then what was
    /// asked for since the last frame (a seed mask set while playing, a reseed) reaches the engine.
    private func beginFrame(_ input: VideoFrameView, output: VideoFrameView?, state: StreamState, posts: inout [Post]) -> Bool {
        let outputBytes = state.output == .alpha ? 1 : 4
        if let problem = input.layoutProblem(bytesPerPixel: 4) ?? output?.layoutProblem(bytesPerPixel: outputBytes) {
            posts.append(.error(ElementError.streamFormat(problem)))
            return false
        }
        // (A mask still loading stays pending: it reseeds the first frame after it has loaded.)
        let reseed = pendingReseed.withLock { pending -> SeedSource?? in
            guard case let .ready(source) = pending else { return nil }
            pending = nil
            return .some(source)
        }
        if reseed != nil { DebugLog.log(GST_LEVEL_LOG, handle, "reseeding at pts \(input.pts)") }
        state.apply(seed: pendingSeed.take(), reseed: reseed)
        return true
    }

    /// What a frame that leaves tells: its cost (ms), whether that is a sample of what a frame costs
    /// (not a seed), the track events of its own inference, and what its stats add.
    private struct FrameEnd {
        let pts: GstClockTime
        let costMs: Double
        var isLatencySample = true
        var events: [TrackEvent] = []
        /// Fills the stats' report and adds the path's own fields; called only when stats are due.
        var stats: (UnsafeMutablePointer<GstStructure>) -> Void = { _ in }
        var prepareStats: () -> Void = {}
    }

    /// A frame's end, whichever the path: counted, the gap rule told when the element was done with
    /// it, a latency sample (a LATENCY message when the cost drifted), its track events and, every
    /// `stats-interval` frames, its stats.
    private func endFrame(_ end: FrameEnd, state: StreamState, settings current: Settings, posts: inout [Post]) {
        state.framesProcessed += 1
        state.gaps.finished(atMs: monotonicMs())
        let (drifted, latencyMs) = latency.withLock { latency -> (Bool, Double) in
            let drifted = end.isLatencySample ? latency.tracker.add(end.costMs) : false
            return (drifted, latency.tracker.expectedMs(fallbackMs: latency.warmUpMs) + latency.heldMs)
        }
        if drifted { posts.append(.latency) }
        for event in end.events { posts.append(.trackEvent(event, pts: end.pts)) }
        guard current.statsInterval > 0, state.framesProcessed % UInt(current.statsInterval) == 0 else { return }
        end.prepareStats()
        let structure = stats(pts: end.pts, totalMs: end.costMs, latencyMs: latencyMs, state: state)
        end.stats(structure)
        posts.append(.stats(structure))
    }

    /// Writes a frame's output from its alpha: the alpha itself (GRAY8) or the composite.
    private func render(_ frame: BGRAImage, alpha: GrayView, into destination: VideoFrameView, state: StreamState,
                        settings current: Settings) {
        switch state.output {
        case .alpha:
            for y in 0..<frame.height {
                (destination.bytes + y * destination.stride).update(from: alpha.base + y * alpha.stride, count: frame.width)
            }
        case let .composite(format):
            state.compositor.composite(frame: frame, alpha: alpha, output: destination.bytes,
                                       outputStride: destination.stride, format: format,
                                       background: current.background, color: current.backgroundColor,
                                       foregroundEstimation: current.edgeColors == .estimated,
                                       premultiplied: current.alphaMode == .premultiplied)
        }
    }

    // MARK: Sync

    /// mode=sync: the frame's own alpha, made now, and its output.
    func transform(input: VideoFrameView, output destination: VideoFrameView) -> GstFlowReturn {
        var posts: [Post] = []
        let flow = stream.withLock { state -> GstFlowReturn in
            guard let state, case let .sync(path) = state.path, let engine = state.engine else { return GST_FLOW_NOT_NEGOTIATED }
            guard beginFrame(input, output: destination, state: state, posts: &posts) else { return GST_FLOW_ERROR }
            let current = snapshot()
            let start = monotonicMs()
            state.report.clear()
            let frame = input.bgra
            do {
                switch state.output {
                case .alpha:
                    try engine.matte(frame, into: destination.gray, report: &state.report)
                case .composite:
                    try path.alphaPlane.withUnsafeMutableBufferPointer { plane in
                        let alpha = GrayImage(base: plane.baseAddress!, width: frame.width, height: frame.height, stride: frame.width)
                        try engine.matte(frame, into: alpha, report: &state.report)
                    }
                    let compositeStart = monotonicMs()
                    GrayView.of(path.alphaPlane, width: frame.width, height: frame.height) { alpha in
                        render(frame, alpha: alpha, into: destination, state: state, settings: current)
                    }
                    state.report.postprocessMs += monotonicMs() - compositeStart
                }
            } catch {
                posts += state.report.notices.map(Post.notice)
                posts.append(.error(error))
                return GST_FLOW_ERROR
            }
            posts += state.report.notices.map(Post.notice)
            let totalMs = monotonicMs() - start
            // Seeding (the warm-up passes) happens once; it is reported as seed-ms, and that frame is no
            // sample of what a frame costs.
            endFrame(FrameEnd(pts: input.pts, costMs: totalMs, isLatencySample: !(state.report.seedMs > 0),
                              events: state.report.events),
                     state: state, settings: current, posts: &posts)
            DebugLog.log(GST_LEVEL_LOG, handle, "frame \(state.framesProcessed) pts \(input.pts): \(totalMs) ms, "
                         + "seeded \(state.report.seeded), memory frames \(state.report.memoryFrames)")
            return GST_FLOW_OK
        }
        for post in posts { deliver(post) }
        return flow
    }

    /// mode=sync, BGRA in and out: the same, written over the frame (see `setInfo`).
    func transformInPlace(_ frame: VideoFrameView) -> GstFlowReturn { transform(input: frame, output: frame) }

    // MARK: Async

    /// Takes an input frame (the buffer reference passes to the queue): handed to the inference
    /// thread (which keeps the newest), its motion estimated, queued.
    private func submitAsync(_ input: VideoFrameView, buffer: OwnedBuffer, arrivalMs: Double) -> GstFlowReturn {
        var posts: [Post] = []
        let flow = stream.withLock { state -> GstFlowReturn in
            guard let state, let (path, matting) = state.running else { return GST_FLOW_NOT_NEGOTIATED }
            if path.failed { return GST_FLOW_ERROR }
            guard beginFrame(input, output: nil, state: state, posts: &posts) else { return GST_FLOW_ERROR }
            let pts = UInt64(input.pts)
            matting.submit(input.bgra, pts: pts)
            if let carry = path.carry, carry.frameWidth == input.bgra.width, carry.frameHeight == input.bgra.height {
                if snapshot().alignment == .motion {
                    carry.add(input.bgra, pts: pts)
                    path.motionMs = carry.lastMotionMs
                    // The alpha coming next is carried from its frame: compose its motion as it goes.
                    if let coming = matting.inFlightPts { carry.follow(from: coming) }
                } else {
                    path.forgetMotion()
                    path.motionMs = 0
                }
            }
            path.queue.append(QueuedFrame(buffer: buffer, pts: pts, arrivalMs: arrivalMs))
            return GST_FLOW_OK
        }
        for post in posts { deliver(post) }
        return flow
    }

    /// The base class asks for output after each input: in async mode the next frame that may leave
    /// now, if any (else the base class's own, which calls `transform`).
    func generateOutput(_ output: UnsafeMutablePointer<UnsafeMutablePointer<GstBuffer>?>) -> GstFlowReturn {
        guard isAsync else { return handle.parentGenerateOutput(output) }
        output.pointee = nil
        // (With async-delay, frames leave from the release thread, on their own deadline.)
        if heldFrameReleaser != nil { return asyncFailed ? GST_FLOW_ERROR : GST_FLOW_OK }
        guard let (frame, alpha) = releaseNext() else { return asyncFailed ? GST_FLOW_ERROR : GST_FLOW_OK }
        return produce(frame, alpha: alpha, into: output)
    }

    /// Pushes every frame async mode still holds (EOS, new caps), after the inference thread finished
    /// what it holds (waiting at most the delay the frames would have waited anyway, and at least
    /// for one inference).
    func drainHeldFrames() -> GstFlowReturn {
        guard let (matting, delay) = stream.withLock({ state in state?.running.map { ($0.matting, $0.path.delayMs) } }) else {
            return GST_FLOW_OK
        }
        matting.waitIdle(timeoutMs: max(delay, 5000))
        if let releaser = heldFrameReleaser {
            // The release thread lets everything go now; this thread waits until it did.
            stream.withLock { $0?.asyncPath?.draining = true }
            releaser.poke()
            waitUntilHeldFramesGone(releaser)
            stream.withLock { $0?.asyncPath?.draining = false }
            return releaser.takeDownstreamFlow() ?? GST_FLOW_OK
        }
        var released: [(frame: QueuedFrame, alpha: AsyncMatting.Alpha?)] = []
        while let next = releaseNext(draining: true) { released.append(next) }
        for (frame, alpha) in released {
            var out: UnsafeMutablePointer<GstBuffer>?
            let flow = produce(frame, alpha: alpha, into: &out)
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

    /// An event the base class acts on (a segment, a new stream) keeps its place in the stream: the
    /// frames held before it leave first (each on its own deadline), then it goes on.
    func waitForHeldFrames() {
        if let releaser = heldFrameReleaser { waitUntilHeldFramesGone(releaser) }
    }

    /// Until no frame is held or being pushed (or the pad flushes).
    private func waitUntilHeldFramesGone(_ releaser: FrameReleaser) {
        _ = releaser.waitUntil { handle.sourceIsFlushing || (stream.withLock { $0?.framesHeld ?? 0 } == 0 && !releaser.isPushing) }
    }

    /// The release thread's next step: the output of the oldest frame once it may leave (its own alpha
    /// ready, its delay over, a drain), else how long to sleep.
    func nextDeparture(of releaser: FrameReleaser) -> FrameReleaser.Step {
        var posts: [Post] = []
        let decision = stream.withLock { state -> Departure? in
            guard let state, let path = state.asyncPath, path.releaser === releaser else { return nil }
            if releaser.isFlushing { return Departure.none }  // (FLUSH_STOP forgets them)
            let departure = self.departure(state: state, draining: path.draining, posts: &posts)
            if case .leave = departure { releaser.taking() }
            return departure
        }
        for post in posts { deliver(post) }
        switch decision {
        case nil: return .retire
        case .none?: return .idle
        case let .waitUntil(ms)?: return .waitUntil(ms)
        case let .leave(frame, alpha)?:
            var out: UnsafeMutablePointer<GstBuffer>?
            let flow = produce(frame, alpha: alpha, into: &out)
            return .push(flow == GST_FLOW_OK ? out : nil, flow, then: frame.followingEvents)
        }
    }

    /// Forgets the queued frames (FLUSH_STOP), and the events behind them except the sticky ones.
    func flushHeldFrames() {
        stream.withLock { state in
            guard let path = state?.asyncPath else { return }
            path.stickyAfterFlush += path.queue.flatMap { $0.followingEvents.filter(\.outlivesFlush) }
            path.queue.removeAll()
        }
    }

    /// The sticky events a flush kept (see `stickyAfterFlush`), sent on now: after the new segment,
    /// before the first frame or EOS after the flush.
    func pushStickyAfterFlush() {
        let events = stream.withLock { state -> [OwnedEvent] in
            guard let path = state?.asyncPath, !path.stickyAfterFlush.isEmpty else { return [] }
            defer { path.stickyAfterFlush = [] }
            return path.stickyAfterFlush
        }
        guard !events.isEmpty else { return }
        let send = { for event in events { _ = self.handle.push(event) } }
        if let releaser = heldFrameReleaser { releaser.exclusively(send) } else { send() }
    }

    /// A frame's own alpha is worth waiting for, even with async-delay=0, when inference takes less
    /// than this (ms): a quarter of a frame at 30 fps. A fast engine (the segmenter, ~5 ms) then gives
    /// every frame its own alpha at the input rate; a slow one (MatAnyone2) is never waited for.
    static let quickWaitMs = 8.0

    /// The next frame that may leave now (with the alpha to apply), or nil. `draining` releases
    /// everything (EOS, new caps).
    private func releaseNext(draining: Bool = false) -> (frame: QueuedFrame, alpha: AsyncMatting.Alpha?)? {
        var posts: [Post] = []
        let next = stream.withLock { state -> (QueuedFrame, AsyncMatting.Alpha?)? in
            guard let state, let (path, matting) = state.running, let head = path.queue.first else { return nil }
            if !draining, path.delayMs < MatteFilter.quickWaitMs,
               let typical = matting.medianInferenceMs, typical < MatteFilter.quickWaitMs {
                matting.waitForAlpha(of: head.pts, timeoutMs: MatteFilter.quickWaitMs)
            }
            guard case let .leave(frame, alpha) = departure(state: state, draining: draining, posts: &posts) else { return nil }
            return (frame, alpha)
        }
        for post in posts { deliver(post) }
        return next
    }

    /// Whether the oldest held frame leaves now (taken from the queue, with the alpha to apply), or
    /// when it will (its delay over), or nothing is held. Under the stream lock.
    private enum Departure {
        case leave(QueuedFrame, AsyncMatting.Alpha?)
        case waitUntil(Double)
        case none
    }

    private func departure(state: StreamState, draining: Bool, posts: inout [Post]) -> Departure {
        guard let (path, matting) = state.running, let head = path.queue.first else { return .none }
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
        return .leave(head, alpha)
    }

    /// The output buffer of a released frame: allocated as the base class allocates its own
    /// (metadata and timestamps copied), written by `renderHeld`.
    private func produce(_ frame: QueuedFrame, alpha: AsyncMatting.Alpha?,
                         into output: UnsafeMutablePointer<UnsafeMutablePointer<GstBuffer>?>) -> GstFlowReturn {
        let (prepared, buffer) = handle.prepareOutputBuffer(for: frame.buffer.buffer)
        guard prepared == GST_FLOW_OK, let buffer else { return prepared == GST_FLOW_OK ? GST_FLOW_ERROR : prepared }
        let outbuf = OwnedBuffer(taking: buffer)
        let flow = handle.withMappedFrame(frame.buffer.buffer, .input) { input in
            handle.withMappedFrame(buffer, .output) { out in renderHeld(input: input, output: out, alpha: alpha) } ?? GST_FLOW_ERROR
        } ?? GST_FLOW_ERROR
        guard flow == GST_FLOW_OK else { return flow }  // (outbuf released)
        output.pointee = outbuf.release()
        return GST_FLOW_OK
    }

    /// alignment=motion: `alpha` (of an older frame) carried along the motion to the frame at `pts`,
    /// written to `path.carriedPlane`; nil (use the alpha as it is) for the frame's own alpha, an alpha
    /// of a later frame, or motion not known (a reset since, older than the motion kept).
    private func carry(alpha: AsyncMatting.Alpha, to pts: UInt64, path: AsyncPath, settings current: Settings) -> MotionCarry.Carried? {
        guard current.alignment == .motion, alpha.pts < pts, let carry = path.carry,
              alpha.plane.count == carry.frameWidth * carry.frameHeight, path.carriedPlane.count == alpha.plane.count,
              carry.knows(from: alpha.pts, to: pts) else {
            return nil
        }
        if path.carrySource?.pts != alpha.pts {
            let small = GrayView.of(alpha.plane, width: carry.frameWidth, height: carry.frameHeight) { carry.carrySized($0) }
            path.carrySource = (alpha.pts, small)
        }
        let carried = path.carriedPlane.withUnsafeMutableBufferPointer {
            carry.carry(path.carrySource!.plane, from: alpha.pts, to: pts,
                        into: GrayImage(base: $0.baseAddress!, width: carry.frameWidth, height: carry.frameHeight, stride: carry.frameWidth))
        }
        DebugLog.log(GST_LEVEL_LOG, handle, "alpha of pts \(alpha.pts) carried \(carried?.frames ?? 0) frames to pts \(pts)")
        return carried
    }

    /// Writes the output of a released frame from its alpha (carried to it, or `no-person-alpha`
    /// before the first), read where it lies: no copy of the plane.
    private func renderHeld(input: VideoFrameView, output destination: VideoFrameView, alpha: AsyncMatting.Alpha?) -> GstFlowReturn {
        var posts: [Post] = []
        let flow = stream.withLock { state -> GstFlowReturn in
            guard let state, let (path, matting) = state.running else { return GST_FLOW_NOT_NEGOTIATED }
            let bytesPerPixel = state.output == .alpha ? 1 : 4
            if let problem = input.layoutProblem(bytesPerPixel: 4) ?? destination.layoutProblem(bytesPerPixel: bytesPerPixel) {
                posts.append(.error(ElementError.streamFormat(problem)))
                return GST_FLOW_ERROR
            }
            let start = monotonicMs()
            let current = snapshot()
            let frame = input.bgra
            let usable = alpha.flatMap { $0.plane.count == frame.width * frame.height ? $0 : nil }
            let carried = usable.flatMap { carry(alpha: $0, to: UInt64(input.pts), path: path, settings: current) }
            let plane = carried != nil ? path.carriedPlane : usable?.plane ?? path.noAlphaPlane
            GrayView.of(plane, width: frame.width, height: frame.height) { matte in
                render(frame, alpha: matte, into: destination, state: state, settings: current)
            }
            // (The frame's cost includes its motion, estimated when it arrived.)
            let costMs = monotonicMs() - start + path.motionMs
            var end = FrameEnd(pts: input.pts, costMs: costMs)
            end.prepareStats = {
                // The engine's figures are those of the alpha used (the inference thread's frame);
                // the streaming thread's own work is this frame's compositing. (Its track events
                // were posted by the inference thread.)
                if let usable { state.report = usable.report } else {
                    state.report.clear()
                    state.report.seeded = false  // no alpha yet (models loading, no seed): nothing tracked
                }
                state.report.preprocessMs = 0
                state.report.postprocessMs = costMs
                state.report.inferenceMs = usable?.inferenceMs ?? 0
            }
            end.stats = { stats in
                if let usable { shim_structure_set_double(stats, "alpha-age-ms", (Double(input.pts) - Double(usable.pts)) / 1_000_000) }
                if current.alignment == .motion {
                    shim_structure_set_double(stats, "motion-ms", path.motionMs)
                    shim_structure_set_uint(stats, "carry-frames", UInt32(carried?.frames ?? 0))
                    shim_structure_set_double(stats, "carry-pixels", carried?.meanPixels ?? 0)
                }
                shim_structure_set_double(stats, "inference-fps", matting.inferenceFPS)
                shim_structure_set_uint(stats, "frames-held", UInt32(path.queue.count))
            }
            endFrame(end, state: state, settings: current, posts: &posts)
            DebugLog.log(GST_LEVEL_LOG, handle, "async frame pts \(input.pts): alpha of pts \(usable.map { "\($0.pts)" } ?? "none"), "
                         + "\(costMs) ms")
            return GST_FLOW_OK
        }
        for post in posts { deliver(post) }
        return flow
    }

    // MARK: Bus messages

    func deliver(_ post: Post) {
        switch post {
        case let .error(error, file, function, line):
            ErrorMapping.postError(error, on: handle, file: file, function: function, line: line)
        case .latency: handle.postLatencyMessage()
        case let .stats(structure): handle.postElementMessage(structure)
        case let .trackEvent(event, pts): handle.postElementMessage(MatteFilter.reseededMessage(event, pts: pts))
        case let .notice(notice): ErrorMapping.post(notice, on: handle)
        }
    }

    /// `matanyone-reseeded, person=(uint)1, reason=(string)drift, pts=…, iou=(double)0.12, uncertainty=…`
    static func reseededMessage(_ event: TrackEvent, pts: GstClockTime) -> UnsafeMutablePointer<GstStructure> {
        let message = gst_structure_new_empty("matanyone-reseeded")!
        shim_structure_set_uint(message, "person", UInt32(event.person))
        shim_structure_set_string(message, "reason", event.reason.rawValue)
        shim_structure_set_uint64(message, "pts", pts)
        if event.iou >= 0 { shim_structure_set_double(message, "iou", event.iou) }
        if event.uncertainty >= 0 { shim_structure_set_double(message, "uncertainty", event.uncertainty) }
        return message
    }

    func stats(pts: GstClockTime, totalMs: Double, latencyMs: Double, state: StreamState) -> UnsafeMutablePointer<GstStructure> {
        let report = state.report
        let stats = gst_structure_new_empty("matanyone-stats")!
        shim_structure_set_uint64(stats, "frame", state.framesProcessed)
        shim_structure_set_uint64(stats, "pts", pts)
        // (In async mode, until the inference thread has made the engine, nothing of it is known.)
        if let engine = state.engine {
            shim_structure_set_string(stats, "engine", engine.kind.rawValue)
            shim_structure_set_string(stats, "precision", engine.precision.rawValue)
            if let server = engine.server {
                shim_structure_set_string(stats, "provider", "server")
                shim_structure_set_string(stats, "server", server)
            } else {
                shim_structure_set_string(stats, "provider", engine.provider.rawValue)
            }
            shim_structure_set_string(stats, "data", engine.server != nil ? "server" : engine.dataOnDevice ? "device" : "host")
            if !engine.placement.isEmpty { shim_structure_set_string(stats, "model-placement", engine.placement) }
        }
        if let server = report.server {
            // The server's share: the round trip, its own compute (its reply) and queue (its statistics).
            shim_structure_set_double(stats, "server-ms", server.roundTripMs)
            shim_structure_set_double(stats, "server-compute-ms", server.computeMs)
            if let queue = server.queueMs { shim_structure_set_double(stats, "server-queue-ms", queue) }
            shim_structure_set_uint64(stats, "server-bytes-sent", UInt(server.bytesSent))
            shim_structure_set_uint64(stats, "server-bytes-received", UInt(server.bytesReceived))
            shim_structure_set_string(stats, "server-transport", server.sharedMemory ? "shared-memory" : "http")
        }
        shim_structure_set_string(stats, "mode", state.asyncPath == nil ? "sync" : "async")
        shim_structure_set_string(stats, "pixel-isa", PixelISA.active.description)
        shim_structure_set_double(stats, "preprocess-ms", report.preprocessMs)
        shim_structure_set_double(stats, "inference-ms", report.inferenceMs)
        shim_structure_set_double(stats, "postprocess-ms", report.postprocessMs)
        shim_structure_set_double(stats, "total-ms", totalMs)
        shim_structure_set_double(stats, "memory-ms", report.memoryMs)
        shim_structure_set_double(stats, "latency-ms", latencyMs)
        // (In async mode frames still queued have not left yet: they are not dropped.)
        shim_structure_set_uint64(stats, "frames-dropped", state.framesSubmitted &- state.framesProcessed &- UInt(state.framesHeld))
        shim_structure_set_boolean(stats, "seeded", report.seeded ? 1 : 0)
        shim_structure_set_uint(stats, "memory-frames", UInt32(report.memoryFrames))
        if report.seedMs > 0 { shim_structure_set_double(stats, "seed-ms", report.seedMs) }
        guard let engine = state.engine else { return stats }
        if engine.kind == .matanyone2 {
            shim_structure_set_uint(stats, "people", UInt32(report.people))
            for (slot, ms) in report.personMs.enumerated() where ms > 0 {
                shim_structure_set_double(stats, "person-\(slot + 1)-ms", ms)
            }
            if report.watchIoU >= 0 { shim_structure_set_double(stats, "watch-iou", report.watchIoU) }
            if report.watchUncertainty >= 0 { shim_structure_set_double(stats, "watch-uncertainty", report.watchUncertainty) }
        }
        for (name, ms) in zip(engine.modelNames, report.modelMs) {
            shim_structure_set_double(stats, name + "-ms", ms)
        }
        return stats
    }
}
