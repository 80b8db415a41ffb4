import Foundation

/// The gap rule (`reset-after-gap`): when the stream time between two buffers says the track is
/// stale and must start over. Only upstream's silence is a gap:
/// - every buffer that reaches the element counts, processed or dropped (predictive QoS, the base
///   class's QoS): frames dropped here are the stream going on, not missing;
/// - stream time that passed while the element worked on the previous buffer (a seed takes seconds
///   on a CPU) is subtracted: a source that drops what it cannot push meanwhile left that gap;
/// - in a live pipeline a forward gap also needs that long on the clock with no buffer from
///   upstream, counted from when the previous buffer could have left this element and the sinks
///   (its processing done, and not before its running time plus the pipeline latency, when a
///   syncing sink holds the thread): a leaky queue or a source catching up after the element was
///   slow delivers its jump at once.
/// A backward jump (a looping source without a new segment) is always a gap. Pure logic: no GStreamer.
struct GapRule {
    /// One buffer as it arrives.
    struct Arrival {
        /// Its stream time (ns), nil without a timestamp.
        var streamTime: UInt64?
        var isDiscont = false
        /// Its running time and the clock's running time now (ns), when the element has a clock.
        var clock: (running: UInt64, now: UInt64)?
        /// Monotonic milliseconds at arrival.
        var atMs: Double
    }

    /// What the pipeline says of itself when the buffer arrives.
    struct Pipeline {
        var live = false
        /// The latency the sinks were configured with (ns), once known.
        var configuredLatency: UInt64?
    }

    private var last: Arrival?
    /// When the element finished with the last buffer (monotonic ms), nil when it dropped it.
    private var finishedMs: Double?

    /// Forgets the previous buffer (a new track starts with the next one).
    mutating func forget() {
        last = nil
        finishedMs = nil
    }

    /// The element is done with the last buffer that arrived (its output written).
    mutating func finished(atMs: Double) { if last != nil { finishedMs = atMs } }

    /// What a buffer means for the track.
    enum Verdict: Equatable {
        case continues
        /// A gap in stream time that upstream's silence does not explain: the track continues.
        case kept(String)
        /// The track must start over, and why.
        case reset(String)
    }

    /// Records `arrival` and judges it against the buffer before.
    mutating func arrive(_ arrival: Arrival, resetAfterMs: UInt32, pipeline: Pipeline) -> Verdict {
        defer {
            if arrival.streamTime != nil { last = arrival }
            finishedMs = nil
        }
        if resetAfterMs == 0 { return arrival.isDiscont ? .reset("DISCONT") : .continues }
        guard let streamTime = arrival.streamTime, let previous = last, let previousTime = previous.streamTime else {
            return .continues
        }
        let threshold = Double(resetAfterMs)
        guard streamTime >= previousTime else {
            let backMs = Double(previousTime - streamTime) / 1_000_000
            return backMs > threshold ? .reset("a jump of \(Int(backMs)) ms back in stream time") : .continues
        }
        let streamGapMs = Double(streamTime - previousTime) / 1_000_000
        let busyMs = max(0, (finishedMs ?? previous.atMs) - previous.atMs)
        let gapMs = streamGapMs - busyMs
        guard gapMs > threshold else {
            return streamGapMs > threshold
                ? .kept("a gap of \(Int(streamGapMs)) ms of stream time, \(Int(busyMs)) ms of it spent here on the previous buffer")
                : .continues
        }
        guard pipeline.live, let now = arrival.clock?.now, let before = previous.clock else {
            return .reset("a gap of \(Int(gapMs)) ms of stream time")
        }
        var departed = before.now &+ UInt64(busyMs * 1_000_000)
        if let latency = pipeline.configuredLatency { departed = max(departed, before.running &+ latency) }
        let silenceMs = now > departed ? Double(now - departed) / 1_000_000 : 0
        guard silenceMs > threshold else {
            return .kept("a gap of \(Int(gapMs)) ms of stream time, but only \(Int(silenceMs)) ms without a buffer from upstream")
        }
        return .reset("a gap of \(Int(gapMs)) ms of stream time, \(Int(silenceMs)) ms without a buffer from upstream")
    }
}
