import Testing
@testable import MatteElement

/// Latency bookkeeping: pure logic.
struct LatencyTrackerTests {
    @Test func latencyTrackerReportsAHighPercentileAndDetectsDrift() {
        var tracker = LatencyTracker(window: 16)
        #expect(tracker.answer(fallbackMs: 12) == 12)
        for _ in 0..<15 {
            let drifted = tracker.add(10)
            #expect(!drifted)
        }
        #expect(tracker.currentMs == 10)
        _ = tracker.answer(fallbackMs: 0)
        #expect(tracker.reportedMs == 10)
        // One slow frame in sixteen: the 95th percentile moves to it.
        let drifted = tracker.add(40)
        #expect(drifted)
        #expect(tracker.currentMs == 40)
        _ = tracker.answer(fallbackMs: 0)
        // Back to steady 10 ms: once the slow frame leaves the window, drift is reported again.
        var reported = false
        for _ in 0..<16 { reported = tracker.add(10) || reported }
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
}
