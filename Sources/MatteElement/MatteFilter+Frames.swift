import CGStreamer
import Foundation
import MatteEngine
import MattePixels

/// A frame's journey through the element. Every buffer enters through `submit`; in sync mode the
/// base class then calls `transform` (SyncPath), in async mode it is queued and leaves through
/// `generateOutput`, the release thread or a drain (AsyncPath). Whatever the path, a frame begins
/// with its planes checked and what was asked for since the last frame handed on
/// (`takeFrameRequests`) and ends in `endFrame` (latency sample, track events, stats); its output
/// is written by `render` (the alpha or the composite). Each path decides under its own lock and
/// works outside it: no model call, frame copy, motion estimate, composite or wait happens while
/// any lock is held.
extension MatteFilter {
    // MARK: Entry

    /// Every input buffer (the reference passes to the element): counted and judged by the gap rule,
    /// then queued (async), dropped before any work (predictive QoS) or handed to the base class.
    func submit(_ buffer: UnsafeMutablePointer<GstBuffer>?, isDiscont: gboolean) -> GstFlowReturn {
        guard let buffer else { return handle.parentSubmitInputBuffer(buffer, isDiscont: isDiscont) }
        // When the frame came: what may hold it up below (room in the queue, a push in progress,
        // the motion) must not push its async-delay deadline later.
        let arrivalMs = monotonicMs()
        let entered = DispatchTime.now().uptimeNanoseconds
        defer { waits.addSubmit(Int(DispatchTime.now().uptimeNanoseconds - entered)) }
        // One clock reading per buffer, for the gap rule and predictive QoS alike.
        let timing = handle.liveTiming(of: buffer)
        arrived(handle.arrival(of: buffer, timing: timing), pts: buffer.pointee.pts)
        watchBacklog(timing)
        awaitReseedMask()
        if let path = runningAsyncPath { return path.submit(buffer, arrivalMs: arrivalMs) }
        if handle.qosEnabled, let timing, let late = lateness(runningTime: timing.runningTime, now: timing.now) {
            handle.postDropped(buffer, runningTime: timing.runningTime, late: late, counts: frameCounts)
            _ = OwnedBuffer(taking: buffer)  // (released: the frame is gone)
            return shim_flow_dropped()
        }
        return handle.parentSubmitInputBuffer(buffer, isDiscont: isDiscont)
    }

    /// The async path once its inference thread runs (after the first caps), else nil: frames then
    /// take the base class's way (`transform`).
    var runningAsyncPath: AsyncPath? {
        guard case let .async(path)? = currentPath, path.isRunning else { return nil }
        return path
    }

    /// The base class asks for output after each input: in async mode the path's next frame, if any
    /// (else the base class's own, which calls `transform`).
    func generateOutput(_ output: UnsafeMutablePointer<UnsafeMutablePointer<GstBuffer>?>) -> GstFlowReturn {
        let entered = DispatchTime.now().uptimeNanoseconds
        defer { waits.addSubmit(Int(DispatchTime.now().uptimeNanoseconds - entered)) }
        guard let path = runningAsyncPath else { return handle.parentGenerateOutput(output) }
        return path.generateOutput(output)
    }

    /// mode=sync: the frame's own alpha and its output (SyncPath).
    func transform(input: VideoFrameView, output destination: VideoFrameView) -> GstFlowReturn {
        guard case let .sync(path)? = currentPath else { return GST_FLOW_NOT_NEGOTIATED }
        return path.transform(input: input, output: destination)
    }

    /// mode=sync, BGRA in and out: the same, written over the frame (see `setInfo`).
    func transformInPlace(_ frame: VideoFrameView) -> GstFlowReturn { transform(input: frame, output: frame) }

    // MARK: Beginning and end

    /// What was asked for since the last frame (a seed mask set while playing, a reseed), taken
    /// for this frame. (A mask still loading stays pending: it reseeds the first frame after it has
    /// loaded.)
    func takeFrameRequests(pts: GstClockTime) -> (seed: SeedSource?, reseed: SeedSource??) {
        let taken = control.withLock { control -> (SeedSource?, SeedSource??) in
            var reseed: SeedSource?? = nil
            if case let .ready(source) = control.reseed.pending {
                control.reseed.pending = nil
                reseed = .some(source)
            }
            defer { control.reseed.seed = nil }
            return (control.reseed.seed, reseed)
        }
        if taken.1 != nil { DebugLog.log(GST_LEVEL_LOG, handle, "reseeding at pts \(pts)") }
        return taken
    }

    /// What a frame that leaves tells: its cost (ms), whether that is a sample of what a frame costs
    /// (not a seed), the track events of its own inference, the engine's report and what its stats add.
    struct FrameEnd {
        let pts: GstClockTime
        let costMs: Double
        var isLatencySample = true
        var events: [TrackEvent] = []
        var report: FrameReport
        /// Adds the path's own fields to the stats; called only when stats are due.
        var stats: (UnsafeMutablePointer<GstStructure>) -> Void = { _ in }
    }

    /// A frame's end, whichever the path (which counted it under its lock: `counts`): a latency
    /// sample (a LATENCY message when the cost drifted), its track events and, every
    /// `stats-interval` frames, its stats.
    func endFrame(_ end: FrameEnd, counts: FrameCounts, settings current: Settings, posts: inout [Post]) {
        let (drifted, latencyMs) = control.withLock { control -> (Bool, Double) in
            let drifted = end.isLatencySample ? control.latency.tracker.add(end.costMs) : false
            return (drifted, control.latency.tracker.expectedMs(fallbackMs: control.latency.warmUpMs) + control.latency.heldMs)
        }
        if drifted { posts.append(.latency) }
        for event in end.events { posts.append(.trackEvent(event, pts: end.pts)) }
        guard current.statsInterval > 0, counts.processed % UInt(current.statsInterval) == 0 else { return }
        let structure = stats(pts: end.pts, totalMs: end.costMs, latencyMs: latencyMs, report: end.report, counts: counts)
        end.stats(structure)
        posts.append(.stats(structure))
    }

    /// Writes a frame's output from its alpha: the alpha itself (GRAY8) or the composite.
    func render(_ frame: BGRAImage, alpha: GrayView, into destination: VideoFrameView, output: NegotiatedOutput,
                compositor: inout Compositor, settings current: Settings) {
        switch output {
        case .alpha:
            for y in 0..<frame.height {
                (destination.bytes + y * destination.stride).update(from: alpha.base + y * alpha.stride, count: frame.width)
            }
        case let .composite(format):
            compositor.composite(frame: frame, alpha: alpha, output: destination.bytes,
                                 outputStride: destination.stride, format: format,
                                 background: current.background, color: current.backgroundColor,
                                 foregroundEstimation: current.edgeColors == .estimated,
                                 premultiplied: current.alphaMode == .premultiplied)
        }
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

    func stats(pts: GstClockTime, totalMs: Double, latencyMs: Double, report: FrameReport, counts: FrameCounts) -> UnsafeMutablePointer<GstStructure> {
        let stats = gst_structure_new_empty("matanyone-stats")!
        shim_structure_set_uint64(stats, "frame", counts.processed)
        shim_structure_set_uint64(stats, "pts", pts)
        // (In async mode, until the inference thread has made the engine, nothing of it is known.)
        if let engine = counts.engine {
            shim_structure_set_string(stats, "engine", engine.kind.rawValue)
            shim_structure_set_string(stats, "precision", engine.precision.rawValue)
            shim_structure_set_string(stats, "license", engine.license)
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
        shim_structure_set_string(stats, "mode", counts.isAsync ? "async" : "sync")
        shim_structure_set_string(stats, "pixel-isa", PixelISA.active.description)
        shim_structure_set_double(stats, "preprocess-ms", report.preprocessMs)
        shim_structure_set_double(stats, "inference-ms", report.inferenceMs)
        shim_structure_set_double(stats, "postprocess-ms", report.postprocessMs)
        shim_structure_set_double(stats, "total-ms", totalMs)
        shim_structure_set_double(stats, "memory-ms", report.memoryMs)
        shim_structure_set_double(stats, "latency-ms", latencyMs)
        // (Cumulative: a benchmark divides their growth by the frames between two reports.)
        shim_structure_set_double(stats, "streaming-ms", waits.submitMs)
        shim_structure_set_double(stats, "streaming-wait-ms", waits.streamingWaitMs)
        shim_structure_set_double(stats, "release-wait-ms", waits.releaseWaitMs)
        // (In async mode frames still queued have not left yet: they are not dropped.)
        shim_structure_set_uint64(stats, "frames-dropped", counts.submitted &- counts.processed &- UInt(counts.held))
        shim_structure_set_boolean(stats, "seeded", report.seeded ? 1 : 0)
        shim_structure_set_uint(stats, "memory-frames", UInt32(report.memoryFrames))
        if report.seedMs > 0 { shim_structure_set_double(stats, "seed-ms", report.seedMs) }
        // (From the frame's report, not the engine: in async mode the engine is the inference thread's.)
        if report.downsampleRatio > 0 { shim_structure_set_double(stats, "downsample-ratio", report.downsampleRatio) }
        guard let engine = counts.engine else { return stats }
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
