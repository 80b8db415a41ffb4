import CGStreamer
import Foundation
import MatteEngine
import MattePixels

/// A frame waiting to leave in async mode: its buffer (our reference) and when it arrived.
struct QueuedFrame {
    let buffer: OwnedBuffer
    let pts: UInt64
    let arrivalMs: Double
}

/// mode=async on the streaming thread: every input frame is handed to the inference thread (which
/// keeps the newest) and queued; frames leave through `releaseNext`, each with the finished alpha
/// closest to it in time, at once or — with async-delay — once their own alpha is ready or the delay
/// has passed.
extension MatteFilter {
    var isAsync: Bool { stream.withLock { $0?.async != nil } }

    /// Whether the inference thread failed (its error is on the bus): streaming must stop.
    var asyncFailed: Bool { stream.withLock { $0?.asyncFailed ?? false } }

    /// Takes an input frame (the buffer reference passes to the queue).
    func submitAsync(_ input: VideoFrameView, buffer: OwnedBuffer) -> GstFlowReturn {
        var posts: [Post] = []
        let flow = stream.withLock { state -> GstFlowReturn in
            guard let state, let async = state.async else { return GST_FLOW_NOT_NEGOTIATED }
            if state.asyncFailed { return GST_FLOW_ERROR }
            if let problem = input.layoutProblem(bytesPerPixel: 4) {
                posts.append(.streamError(problem))
                return GST_FLOW_ERROR
            }
            if let source = pendingSeed.take() {
                async.replaceSeed(source)
            }
            if let reseed = pendingReseed.take() {
                async.reseed(reseed)
            }
            let pts = UInt64(input.pts)
            async.submit(input.bgra, pts: pts)
            if let carry = state.carry, carry.frameWidth == input.bgra.width, carry.frameHeight == input.bgra.height {
                if snapshot().alignment == .motion {
                    carry.add(input.bgra, pts: pts)
                    state.motionMs = carry.lastMotionMs
                    // The alpha coming next is carried from its frame: compose its motion as it goes.
                    if let coming = async.inFlightPts { carry.follow(from: coming) }
                } else {
                    state.forgetMotion()
                    state.motionMs = 0
                }
            }
            state.queue.append(QueuedFrame(buffer: buffer, pts: pts, arrivalMs: monotonicMs()))
            return GST_FLOW_OK
        }
        for post in posts { deliver(post) }
        return flow
    }

    /// A frame's own alpha is worth waiting for, even with async-delay=0, when inference takes less
    /// than this (ms): a quarter of a frame at 30 fps. A fast engine (the segmenter, ~5 ms) then gives
    /// every frame its own alpha at the input rate; a slow one (MatAnyone2) is never waited for.
    static let quickWaitMs = 8.0

    /// The next frame that may leave now (with the alpha to apply), or nil. `draining` releases
    /// everything (EOS, new caps).
    func releaseNext(draining: Bool = false) -> (frame: QueuedFrame, alpha: AsyncMatting.Alpha?)? {
        var posts: [Post] = []
        let next = stream.withLock { state -> (QueuedFrame, AsyncMatting.Alpha?)? in
            guard let state, let async = state.async, let head = state.queue.first else { return nil }
            if !draining, state.asyncDelayMs < MatteFilter.quickWaitMs,
               let typical = async.medianInferenceMs, typical < MatteFilter.quickWaitMs {
                async.waitForAlpha(of: head.pts, timeoutMs: MatteFilter.quickWaitMs)
            }
            let (alpha, ownComing, failure) = async.closest(to: head.pts)
            if let failure {
                if !state.asyncFailed { posts.append(.error(failure)) }
                state.asyncFailed = true
                state.queue.removeAll()
                return nil
            }
            let waited = monotonicMs() - head.arrivalMs
            let ready: Bool
            if draining || state.asyncDelayMs == 0 || waited >= state.asyncDelayMs {
                ready = true
            } else if let alpha, alpha.pts == head.pts {
                ready = true  // its own alpha
            } else {
                // Not its own alpha coming: one from this frame's time or later is as close as any will be.
                ready = !ownComing && (alpha.map { $0.pts >= head.pts } ?? false)
            }
            guard ready else { return nil }
            state.queue.removeFirst()
            return (head, alpha)
        }
        for post in posts { deliver(post) }
        return next
    }

    /// Everything still queued, after the inference thread finished what it holds (waiting at most
    /// the delay the frames would have waited anyway, and at least for one inference).
    func drainAsync() -> [(frame: QueuedFrame, alpha: AsyncMatting.Alpha?)] {
        guard let (async, delay) = stream.withLock({ state in state?.async.map { ($0, state!.asyncDelayMs) } }) else { return [] }
        async.waitIdle(timeoutMs: max(delay, 5000))
        var out: [(frame: QueuedFrame, alpha: AsyncMatting.Alpha?)] = []
        while let next = releaseNext(draining: true) { out.append(next) }
        return out
    }

    /// Forgets the queued frames (FLUSH_STOP).
    func flushAsync() { stream.withLock { $0?.queue.removeAll() } }

    /// alignment=motion: `alpha` (of an older frame) carried along the motion to the frame at `pts`,
    /// written to `state.carriedPlane`; nil (use the alpha as it is) for the frame's own alpha, an alpha
    /// of a later frame, or motion not known (a reset since, older than the motion kept).
    private func carry(alpha: AsyncMatting.Alpha, to pts: UInt64, state: StreamState, settings current: Settings) -> MotionCarry.Carried? {
        guard current.alignment == .motion, alpha.pts < pts, let carry = state.carry,
              alpha.plane.count == carry.frameWidth * carry.frameHeight, state.carriedPlane.count == alpha.plane.count,
              carry.knows(from: alpha.pts, to: pts) else {
            return nil
        }
        if state.carrySource?.pts != alpha.pts {
            var plane = alpha.plane
            let small = plane.withUnsafeMutableBufferPointer {
                carry.carrySized(GrayImage(base: $0.baseAddress!, width: carry.frameWidth, height: carry.frameHeight, stride: carry.frameWidth))
            }
            state.carrySource = (alpha.pts, small)
        }
        let carried = state.carriedPlane.withUnsafeMutableBufferPointer {
            carry.carry(state.carrySource!.plane, from: alpha.pts, to: pts,
                        into: GrayImage(base: $0.baseAddress!, width: carry.frameWidth, height: carry.frameHeight, stride: carry.frameWidth))
        }
        DebugLog.log(GST_LEVEL_LOG, handle, "alpha of pts \(alpha.pts) carried \(carried?.frames ?? 0) frames to pts \(pts)")
        return carried
    }

    /// Writes the output of a released frame: its alpha (`no-person-alpha` before the first) as GRAY8, or the
    /// composite.
    func renderAsync(input: VideoFrameView, output destination: VideoFrameView, alpha: AsyncMatting.Alpha?) -> GstFlowReturn {
        var posts: [Post] = []
        let flow = stream.withLock { state -> GstFlowReturn in
            guard let state, let async = state.async else { return GST_FLOW_NOT_NEGOTIATED }
            let bytesPerPixel = state.output == .alpha ? 1 : 4
            if let problem = input.layoutProblem(bytesPerPixel: 4) ?? destination.layoutProblem(bytesPerPixel: bytesPerPixel) {
                posts.append(.streamError(problem))
                return GST_FLOW_ERROR
            }
            let start = monotonicMs()
            let current = snapshot()
            let frame = input.bgra
            let usable = alpha.flatMap { $0.plane.count == frame.width * frame.height ? $0 : nil }
            let carried = usable.flatMap { carry(alpha: $0, to: UInt64(input.pts), state: state, settings: current) }
            var plane = carried != nil ? state.carriedPlane : usable?.plane ?? state.noAlphaPlane
            plane.withUnsafeMutableBufferPointer { buffer in
                let matte = GrayImage(base: buffer.baseAddress!, width: frame.width, height: frame.height, stride: frame.width)
                switch state.output {
                case .alpha:
                    for y in 0..<frame.height {
                        (destination.bytes + y * destination.stride).update(from: matte.base + y * frame.width, count: frame.width)
                    }
                case let .composite(format):
                    state.compositor.composite(frame: frame, alpha: matte.view, output: destination.bytes,
                                               outputStride: destination.stride, format: format,
                                               background: current.background, color: current.backgroundColor,
                                               foregroundEstimation: current.edgeColors == .estimated,
                                               premultiplied: current.alphaMode == .premultiplied)
                }
            }
            state.framesProcessed += 1
            // (The frame's cost includes its motion, estimated when it arrived.)
            let costMs = monotonicMs() - start + state.motionMs
            state.gaps.finished(atMs: monotonicMs())
            let (drifted, latencyMs) = latency.withLock { latency -> (Bool, Double) in
                (latency.tracker.add(costMs), latency.tracker.expectedMs(fallbackMs: 0) + latency.heldMs)
            }
            if drifted { posts.append(.latency) }
            let ageMs = usable.map { (Double(input.pts) - Double($0.pts)) / 1_000_000 }
            DebugLog.log(GST_LEVEL_LOG, handle, "async frame pts \(input.pts): alpha of pts \(usable.map { "\($0.pts)" } ?? "none"), "
                         + "\(costMs) ms")
            if current.statsInterval > 0, state.framesProcessed % UInt(current.statsInterval) == 0 {
                // The engine's figures are those of the alpha used (the inference thread's frame);
                // the streaming thread's own work is this frame's compositing.
                if let usable { state.report = usable.report } else {
                    state.report.clear()
                    state.report.seeded = false  // no alpha yet (models loading, no seed): nothing tracked
                }
                state.report.preprocessMs = 0
                state.report.postprocessMs = costMs
                state.report.inferenceMs = usable?.inferenceMs ?? 0
                let stats = stats(pts: input.pts, totalMs: costMs, latencyMs: latencyMs, state: state)
                if let ageMs { shim_structure_set_double(stats, "alpha-age-ms", ageMs) }
                if current.alignment == .motion {
                    shim_structure_set_double(stats, "motion-ms", state.motionMs)
                    shim_structure_set_uint(stats, "carry-frames", UInt32(carried?.frames ?? 0))
                    shim_structure_set_double(stats, "carry-pixels", carried?.meanPixels ?? 0)
                }
                shim_structure_set_double(stats, "inference-fps", async.inferenceFPS)
                posts.append(.stats(stats))
            }
            return GST_FLOW_OK
        }
        for post in posts { deliver(post) }
        return flow
    }
}
