import MatteEngine

/// A running high percentile of the element's processing time, for the LATENCY query. When the
/// percentile drifts from what was last reported by more than `driftRatio`, the element posts a
/// LATENCY message so the pipeline reconfigures.
///
/// It goes up at once, and comes down slowly: lowering the latency by some amount makes every frame
/// already on its way to the sink that much late, and a sink drops what is later than its
/// max-lateness (20 ms for video sinks). So it comes down by at most `stepDownMs` at a time, at most
/// once every `stepDownIntervalMs` (frames in flight are then late by less than the sink forgives).
struct LatencyTracker {
    private var samples: [Double]
    private var next = 0
    private var filled = 0
    let percentile: Double
    let driftRatio: Double
    /// Samples before the percentile is trusted over the warm-up run's estimate.
    let settled: Int
    /// The value last handed to the pipeline (ms); 0 before the first answer.
    private(set) var reportedMs = 0.0
    /// A LATENCY message is out and its query has not come back: one is enough. Telling the pipeline
    /// again on every frame until it asks floods the bus (one message a frame at hundreds of frames a
    /// second, each a latency recalculation; seen hiding an EOS behind 16 000 of them).
    private var awaitingAnswer = false
    let stepDownMs = 10.0
    let stepDownIntervalMs = 1000.0
    /// When the reported value last came down (monotonic ms).
    private var loweredAtMs = -Double.infinity

    init(window: Int = 64, percentile: Double = 0.95, driftRatio: Double = 0.25) {
        samples = [Double](repeating: 0, count: window)
        self.percentile = percentile
        self.driftRatio = driftRatio
        settled = min(8, window)
    }

    mutating func reset() {
        next = 0
        filled = 0
        reportedMs = 0
        awaitingAnswer = false
        loweredAtMs = -.infinity
    }

    /// Adds one frame's processing time; returns true when the pipeline should be told. An
    /// underestimate past `underestimateRatio` counts at once: a pipeline configured for less than a
    /// frame costs shows frames late, and predictive QoS then drops frames that would have been on
    /// time. Once settled, an overestimate past `driftRatio` counts too, when a step down may be taken
    /// (an overestimate only adds latency).
    mutating func add(_ ms: Double, nowMs: Double = monotonicMs()) -> Bool {
        samples[next] = ms
        next = (next + 1) % samples.count
        filled = min(filled + 1, samples.count)
        guard reportedMs > 0, !awaitingAnswer else { return false }
        let current = currentMs
        let canLower = nowMs - loweredAtMs >= stepDownIntervalMs
        let drifted = current > (1 + underestimateRatio) * reportedMs
            || (filled >= settled && canLower && current < (1 - driftRatio) * reportedMs)
        if drifted { awaitingAnswer = true }
        return drifted
    }

    let underestimateRatio = 0.1

    /// The percentile over the window (0 when empty).
    var currentMs: Double {
        guard filled > 0 else { return 0 }
        let sorted = samples[0..<filled].sorted()
        let rank = Int((percentile * Double(filled - 1)).rounded(.up))
        return sorted[min(rank, filled - 1)]
    }

    /// What a frame is expected to cost: the percentile once settled, before that the larger of it
    /// and `fallbackMs` (the warm-up run's time).
    func expectedMs(fallbackMs: Double) -> Double {
        filled >= settled ? currentMs : max(currentMs, fallbackMs)
    }

    /// What to answer a LATENCY query with; remembers it as reported.
    mutating func answer(fallbackMs: Double, nowMs: Double = monotonicMs()) -> Double {
        var value = expectedMs(fallbackMs: fallbackMs)
        if reportedMs > 0, value < reportedMs {
            // Down by a step, once an interval (see above); otherwise it stays.
            if nowMs - loweredAtMs >= stepDownIntervalMs {
                value = max(value, reportedMs - stepDownMs)
                loweredAtMs = nowMs
            } else {
                value = reportedMs
            }
        }
        reportedMs = value
        awaitingAnswer = false
        return value
    }
}
