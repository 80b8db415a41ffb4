import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import MatteEngine
import TestPaths

/// mode=async with `alignment`: a frame that leaves with an older frame's alpha wears it carried along
/// the motion (motion) or as it is (none). Real frames of a moving dancer at the real rate, a real
/// segmenter made slow so that alphas are stale by several frames.
@Suite(.serialized) struct AlignmentTests {
    static let width = 512, height = 288
    static let frames = "filesrc location=\"\(TestPaths.dataDir)/test-sample2-512x288.bgra\" ! "
        + "rawvideoparse format=bgra width=512 height=288 framerate=25/1"

    /// The segmenter's own alpha of every frame (sync mode): the truth a stale alpha is judged by.
    static func ownAlphas() throws -> [[UInt8]] {
        let run = runPipeline("\(frames) ! \(TestPaths.element) engine=segmenter temporal-smoothing=0 "
                              + "! video/x-raw,format=GRAY8 ! appsink name=out sync=false")
        #expect(run.error == nil, "\(run.error?.message ?? "")")
        return run.samples
    }

    /// Runs the frames at their real rate through async mode with an engine slowed to `frameMs` a frame.
    func asyncRun(_ name: String, alignment: String, frameMs: Double) -> PipelineRun {
        EngineWrappers.set({ SlowEngine($0, seedMs: frameMs, frameMs: frameMs) }, forElementNamed: name)
        defer { EngineWrappers.set(nil, forElementNamed: name) }
        return runPipeline("\(AlignmentTests.frames) ! identity sync=true ! \(TestPaths.element) name=\(name) engine=segmenter "
                           + "temporal-smoothing=0 mode=async alignment=\(alignment) stats-interval=1 no-person-alpha=255 "
                           + "! video/x-raw,format=GRAY8 ! appsink name=out sync=false")
    }

    static func meanAbs(_ a: [UInt8], _ b: [UInt8]) -> Double {
        zip(a, b).reduce(0.0) { $0 + abs(Double($1.0) - Double($1.1)) } / Double(a.count) / 255
    }

    @Test func aCarriedAlphaIsCloserToTheFramesOwnThanTheStaleOne() throws {
        let truth = try AlignmentTests.ownAlphas()
        try #require(truth.count >= 40)
        let stale = asyncRun("align-none", alignment: "none", frameMs: 150)
        let moved = asyncRun("align-motion", alignment: "motion", frameMs: 150)
        for run in [stale, moved] {
            #expect(run.error == nil && run.reachedEOS, "\(run.error?.message ?? "no EOS")")
            #expect(run.samples.count == truth.count, "every frame leaves")
        }
        // alignment=none: every frame wears one of the engine's alphas as it is (or, before the first,
        // no-person-alpha): today's bytes.
        let noAlpha = [UInt8](repeating: 255, count: AlignmentTests.width * AlignmentTests.height)
        for (index, sample) in stale.samples.enumerated() {
            #expect(sample == noAlpha || truth.contains(sample), "alignment=none frame \(index) is no alpha the engine made")
        }
        // alignment=motion: frames that wore a stale alpha (carry-frames > 0) are nearer their own
        // alpha than the stale alpha they started from would be.
        let stats = moved.elementMessages.filter { $0["name"] == "matanyone-stats" }
        let carriedFrames = stats.compactMap { $0["carry-frames"].flatMap { UInt32($0) } }.filter { $0 > 0 }
        #expect(carriedFrames.count >= 10, "only \(carriedFrames.count) frames carried")
        #expect(stats.allSatisfy { ($0["motion-ms"].flatMap { Double($0) } ?? -1) >= 0 }, "motion-ms missing")
        let staleStats = stale.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(staleStats.allSatisfy { $0["carry-frames"] == nil && $0["motion-ms"] == nil })
        // Over the frames after the first alpha, the carried run's error against each frame's own alpha
        // is clearly below the stale run's (the same engine delay in both; the dancer moves).
        func error(_ run: PipelineRun) -> Double {
            let judged = zip(run.samples, truth).filter { $0.0 != noAlpha }
            return judged.reduce(0.0) { $0 + AlignmentTests.meanAbs($1.0, $1.1) } / Double(max(1, judged.count))
        }
        let staleError = error(stale), carriedError = error(moved)
        #expect(carriedError < staleError * 0.85, "carried error \(carriedError) vs stale \(staleError)")
    }

    /// A new size mid-stream (two clips one after the other), reseeds and EOS with alignment on:
    /// every frame leaves, at its own size, and the motion of the old size is not carried over.
    @Test func sizeChangeReseedAndEOSWithAlignment() throws {
        EngineWrappers.set({ SlowEngine($0, seedMs: 60, frameMs: 60) }, forElementNamed: "align-sizes")
        defer { EngineWrappers.set(nil, forElementNamed: "align-sizes") }
        let first = "videotestsrc num-buffers=20 pattern=ball ! video/x-raw,format=BGRA,width=320,height=180,framerate=30/1"
        let second = "videotestsrc num-buffers=20 pattern=ball ! video/x-raw,format=BGRA,width=256,height=144,framerate=30/1"
        let run = runPipeline("concat name=c ! identity sync=true ! \(TestPaths.element) name=align-sizes engine=segmenter mode=async "
                              + "stats-interval=1 ! video/x-raw,format=GRAY8 ! appsink name=out sync=false "
                              + "\(first) ! c. \(second) ! c.",
                              whilePlaying: { pipeline in
            let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
            let element = gst_bin_get_by_name(bin, "align-sizes")!
            defer { gst_object_unref(element) }
            Thread.sleep(forTimeInterval: 0.3)
            shim_emit_reseed(element)
        })
        #expect(run.error == nil && run.reachedEOS, "\(run.error?.message ?? "no EOS")")
        #expect(run.samples.count == 40, "\(run.samples.count) frames left")
        #expect(run.samples.prefix(20).allSatisfy { $0.count == 320 * 180 } && run.samples.suffix(20).allSatisfy { $0.count == 256 * 144 })
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(stats.contains { ($0["carry-frames"].flatMap { UInt32($0) } ?? 0) > 0 }, "nothing carried")
    }

    /// Switched while playing, alignment takes effect on the next frame, and the stream runs on.
    @Test func alignmentChangesWhilePlaying() throws {
        EngineWrappers.set({ SlowEngine($0, seedMs: 100, frameMs: 100) }, forElementNamed: "align-switch")
        defer { EngineWrappers.set(nil, forElementNamed: "align-switch") }
        let run = runPipeline("\(AlignmentTests.frames) ! identity sync=true ! \(TestPaths.element) name=align-switch engine=segmenter "
                              + "mode=async alignment=none stats-interval=1 ! video/x-raw,format=GRAY8 ! appsink name=out sync=false",
                              whilePlaying: { pipeline in
            let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
            let element = gst_bin_get_by_name(bin, "align-switch")!
            defer { gst_object_unref(element) }
            Thread.sleep(forTimeInterval: 0.5)
            gst_util_set_object_arg(UnsafeMutableRawPointer(element).assumingMemoryBound(to: GObject.self), "alignment", "motion")
        })
        #expect(run.error == nil && run.reachedEOS)
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(stats.first?["motion-ms"] == nil, "alignment=none at the start")
        #expect(stats.contains { ($0["carry-frames"].flatMap { UInt32($0) } ?? 0) > 0 }, "no frame carried after the switch")
    }
}
