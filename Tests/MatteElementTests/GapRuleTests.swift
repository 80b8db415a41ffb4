import Testing
@testable import MatteElement

/// The gap rule as pure logic: which stream-time gaps reset a track (see GapRule). Times in ms.
struct GapRuleTests {
    private let ms: UInt64 = 1_000_000
    private let live = GapRule.Pipeline(live: true, configuredLatency: 300_000_000)
    private let file = GapRule.Pipeline()

    /// A buffer at `stream` ms of stream time arriving at `at` ms; on a clock, with running time =
    /// stream time, when `clockAt` is given.
    private func buffer(_ stream: UInt64, at: Double, clockAt: UInt64? = nil, discont: Bool = false) -> GapRule.Arrival {
        GapRule.Arrival(streamTime: stream * ms, isDiscont: discont,
                        clock: clockAt.map { (stream * ms, $0 * ms) }, atMs: at)
    }

    private func isReset(_ verdict: GapRule.Verdict) -> Bool {
        if case .reset = verdict { return true }
        return false
    }

    @Test func consecutiveBuffersAndDroppedOnesAreNoGap() {
        var rule = GapRule()
        // Buffers 33 ms apart, each dropped (no `finished`), however late they arrive.
        for index in 0..<200 {
            let verdict = rule.arrive(buffer(UInt64(index) * 33, at: 5000 + Double(index)), resetAfterMs: 2000, pipeline: file)
            #expect(verdict == .continues)
        }
    }

    /// The old rule's failure: only processed buffers counted, so a seed's backlog dropped by QoS
    /// read as a gap. Every buffer counts now, dropped or not.
    @Test func aSeedsBacklogDroppedByQoSIsNoGap() {
        var rule = GapRule()
        _ = rule.arrive(buffer(0, at: 0, clockAt: 0), resetAfterMs: 2000, pipeline: live)
        rule.finished(atMs: 5400)  // the seed
        var now = 5400.0
        for index in 1...170 {  // 5.6 s of stream, every buffer dropped at once
            now += 1
            let verdict = rule.arrive(buffer(UInt64(index) * 33, at: now, clockAt: UInt64(now)), resetAfterMs: 2000, pipeline: live)
            #expect(!isReset(verdict))
        }
    }

    @Test func streamTimeThatPassedWhileTheElementWorkedIsNoGap() {
        var rule = GapRule()
        _ = rule.arrive(buffer(0, at: 0), resetAfterMs: 2000, pipeline: file)
        rule.finished(atMs: 5400)
        // The source dropped what it could not push meanwhile: 5.4 s later in stream time.
        #expect(!isReset(rule.arrive(buffer(5433, at: 5401, discont: true), resetAfterMs: 2000, pipeline: file)))
        // The same jump with nothing spent here is a gap (a file with a hole in it).
        #expect(isReset(rule.arrive(buffer(10_900, at: 5402, discont: true), resetAfterMs: 2000, pipeline: file)))
    }

    /// Live: a forward jump that arrives at once (a leaky queue or a source catching up after the
    /// element was slow over several frames) is not upstream's silence.
    @Test func aLiveJumpWithoutSilenceKeepsTheTrack() {
        var rule = GapRule()
        // A buffer of running time 1 s that waited 2.5 s in a queue behind slow frames, 700 ms here.
        _ = rule.arrive(buffer(1000, at: 3500, clockAt: 3500), resetAfterMs: 2000, pipeline: live)
        rule.finished(atMs: 4200)
        // The leaky queue dropped the old ones meanwhile: the next is 3.15 s later in stream time, at once.
        let verdict = rule.arrive(buffer(4150, at: 4200, clockAt: 4200), resetAfterMs: 2000, pipeline: live)
        #expect(!isReset(verdict))
        if case let .kept(reason) = verdict { #expect(reason.contains("without a buffer from upstream")) } else { Issue.record("\(verdict)") }
    }

    /// Live: a syncing sink held the thread until the previous buffer's running time plus the
    /// latency; that wait is not upstream's silence either.
    @Test func theSinksWaitIsNoSilence() {
        var rule = GapRule()
        let slowSink = GapRule.Pipeline(live: true, configuredLatency: 3000 * ms)
        _ = rule.arrive(buffer(0, at: 0, clockAt: 0), resetAfterMs: 2000, pipeline: slowSink)
        rule.finished(atMs: 100)
        #expect(!isReset(rule.arrive(buffer(3100, at: 3100, clockAt: 3100), resetAfterMs: 2000, pipeline: slowSink)))
    }

    @Test func liveSilenceResets() {
        var rule = GapRule()
        _ = rule.arrive(buffer(0, at: 0, clockAt: 0), resetAfterMs: 2000, pipeline: live)
        rule.finished(atMs: 100)
        // 4 s with nothing from upstream (a camera unplugged, a stalled network source).
        let verdict = rule.arrive(buffer(4000, at: 4000, clockAt: 4000), resetAfterMs: 2000, pipeline: live)
        #expect(isReset(verdict))
        // What follows continues the new track.
        #expect(rule.arrive(buffer(4033, at: 4033, clockAt: 4033), resetAfterMs: 2000, pipeline: live) == .continues)
    }

    @Test func aJumpBackAlwaysResetsAndZeroMeansEveryDiscont() {
        var rule = GapRule()
        _ = rule.arrive(buffer(9000, at: 0, clockAt: 0), resetAfterMs: 2000, pipeline: live)
        #expect(isReset(rule.arrive(buffer(0, at: 1, clockAt: 1), resetAfterMs: 2000, pipeline: live)))
        var zero = GapRule()
        #expect(zero.arrive(buffer(0, at: 0), resetAfterMs: 0, pipeline: file) == .continues)
        #expect(zero.arrive(buffer(9000, at: 1), resetAfterMs: 0, pipeline: file) == .continues)
        #expect(isReset(zero.arrive(buffer(9033, at: 2, discont: true), resetAfterMs: 0, pipeline: file)))
    }

    @Test func forgettingStartsAfresh() {
        var rule = GapRule()
        _ = rule.arrive(buffer(0, at: 0), resetAfterMs: 2000, pipeline: file)
        rule.forget()
        #expect(rule.arrive(buffer(90_000, at: 1), resetAfterMs: 2000, pipeline: file) == .continues)
        // A buffer without a timestamp neither counts nor breaks the chain.
        #expect(rule.arrive(GapRule.Arrival(streamTime: nil, atMs: 2), resetAfterMs: 2000, pipeline: file) == .continues)
        #expect(rule.arrive(buffer(90_033, at: 3), resetAfterMs: 2000, pipeline: file) == .continues)
    }
}
