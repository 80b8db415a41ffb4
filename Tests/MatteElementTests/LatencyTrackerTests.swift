import Testing
@testable import MatteElement

/// Latency bookkeeping: pure logic.
struct LatencyTrackerTests {
    @Test func latencyTrackerReportsAHighPercentileAndDetectsDrift() {
        var tracker = LatencyTracker(window: 16)
        #expect(tracker.answer(fallbackMs: 12, nowMs: 0) == 12)
        for _ in 0..<15 {
            let drifted = tracker.add(10, nowMs: 0)
            #expect(!drifted)
        }
        #expect(tracker.currentMs == 10)
        _ = tracker.answer(fallbackMs: 0, nowMs: 0)
        #expect(tracker.reportedMs == 10)
        // One slow frame in sixteen: the 95th percentile moves to it.
        let drifted = tracker.add(40, nowMs: 100)
        #expect(drifted)
        #expect(tracker.currentMs == 40)
        _ = tracker.answer(fallbackMs: 0, nowMs: 100)
        // Back to steady 10 ms: once the slow frame leaves the window, drift is reported again
        // (a second after the latency last came down).
        var reported = false
        for _ in 0..<16 { reported = tracker.add(10, nowMs: 1000) || reported }
        #expect(reported)
    }

    /// One LATENCY message until the pipeline asks again: not one per frame while the drift lasts.
    @Test func latencyTrackerTellsOnceUntilAnswered() {
        var tracker = LatencyTracker(window: 16)
        for _ in 0..<16 { _ = tracker.add(10) }
        _ = tracker.answer(fallbackMs: 0)
        let told = (0..<100).filter { _ in tracker.add(50) }.count
        #expect(told == 1)
        _ = tracker.answer(fallbackMs: 0)
        #expect(tracker.reportedMs == 50)
        #expect((0..<16).contains { _ in tracker.add(5) }, "a new drift after the answer is told again")
    }

    /// Up at once, down slowly: a lower latency makes the frames already on their way late by as
    /// much, so it comes down 10 ms at a time, once a second, and the drift that would lower it is
    /// told only when a step may be taken.
    @Test func latencyComesDownInSmallStepsAndGoesUpAtOnce() {
        var tracker = LatencyTracker(window: 16)
        for _ in 0..<16 { _ = tracker.add(60, nowMs: 0) }
        #expect(tracker.answer(fallbackMs: 0, nowMs: 0) == 60)
        var told = false
        for _ in 0..<16 { told = tracker.add(5, nowMs: 100) || told }
        #expect(told, "a drift down is told when a step may be taken")
        #expect(tracker.answer(fallbackMs: 0, nowMs: 100) == 50)
        #expect(!(0..<16).contains { _ in tracker.add(5, nowMs: 600) }, "not again within the second")
        #expect(tracker.answer(fallbackMs: 0, nowMs: 600) == 50, "a query within the second keeps it")
        #expect((0..<16).contains { _ in tracker.add(5, nowMs: 1100) })
        #expect(tracker.answer(fallbackMs: 0, nowMs: 1100) == 40)
        // A slow frame moves the percentile above: told, and answered in full, at once.
        for _ in 0..<4 { _ = tracker.add(90, nowMs: 1200) }
        #expect(tracker.currentMs == 90)
        #expect(tracker.answer(fallbackMs: 0, nowMs: 1200) == 90)
    }
}
