import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import TestPaths

/// What a live pipeline sees: a clocked source faster than MatAnyone2, a sink that drops what comes
/// late. Counted from the bus: QoS messages (who dropped what) and the element's stats.
struct LiveRun {
    var elementDrops = 0
    var sinkDrops = 0
    /// The sink's drops reported before the stats of the third processed frame: the frames in flight
    /// while the pipeline first configures its latency (stats go out before the frame is pushed, so
    /// the first two frames' drops are among them).
    var sinkDropsAtStart = 0
    var processed = 0
    var stats: [[String: String]] = []
    /// For each stats message: how far the frame's pts (its running time, for a source whose segment
    /// starts at 0) was behind the pipeline clock when the message was read (ms).
    var lagsMs: [Double] = []
    var error: String?
    var reachedEOS = false
}

/// `element`: the matanyone element's name (its QoS messages count as the element's drops).
/// `until`: once it holds for what was collected, the pipeline is sent EOS (a long source stopped
/// when enough happened: async mode loads its models after PLAYING, slowly under ThreadSanitizer).
func runLive(_ description: String, element: String = "m", timeout: Double = 120,
             until: ((LiveRun) -> Bool)? = nil) -> LiveRun {
    withPlayingPipeline(description) { pipeline, bus in collectLive(pipeline, bus, element: element, timeout: timeout, until: until) }
        ?? LiveRun(error: "parse")
}

func collectLive(_ pipeline: UnsafeMutablePointer<GstElement>, _ bus: UnsafeMutablePointer<GstBus>, element: String = "m",
                 timeout: Double, until: ((LiveRun) -> Bool)? = nil) -> LiveRun {
    var run = LiveRun()
    var stopping = false
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline, !run.reachedEOS, run.error == nil {
        guard let message = gst_bus_timed_pop(bus, 100_000_000) else { continue }
        defer { gst_message_unref(message) }
        let source = objectName(message.pointee.src)
        switch message.pointee.type {
        case GST_MESSAGE_EOS:
            run.reachedEOS = true
        case GST_MESSAGE_LATENCY:
            // What every live application does (gst-launch-1.0 too).
            _ = gst_bin_recalculate_latency(UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self))
        case GST_MESSAGE_ERROR:
            var error: UnsafeMutablePointer<GError>?
            gst_message_parse_error(message, &error, nil)
            run.error = error.map { String(cString: $0.pointee.message) } ?? "?"
            g_error_free(error)
        case GST_MESSAGE_QOS:
            var format = GST_FORMAT_UNDEFINED
            var processed: guint64 = 0, dropped: guint64 = 0
            gst_message_parse_qos_stats(message, &format, &processed, &dropped)
            if source == element { run.elementDrops = max(run.elementDrops, Int(dropped)) }
            if source == "sink" {
                run.sinkDrops = max(run.sinkDrops, Int(dropped))
                if run.processed <= 2 { run.sinkDropsAtStart = run.sinkDrops }
            }
        case GST_MESSAGE_ELEMENT:
            guard let structure = gst_message_get_structure(message),
                  String(cString: gst_structure_get_name(structure)) == "matanyone-stats" else { break }
            let fields = structureFields(structure)
            run.stats.append(fields)
            if let pts = fields["pts"].flatMap(Double.init), let clock = gst_element_get_clock(pipeline) {
                let now = Double(gst_clock_get_time(clock)) - Double(gst_element_get_base_time(pipeline))
                gst_object_unref(clock)
                run.lagsMs.append((now - pts) / 1_000_000)
            }
            run.processed = Int(fields["frame"] ?? "") ?? run.processed
            if !stopping, let until, until(run) {
                stopping = true
                _ = gst_element_send_event(pipeline, gst_event_new_eos())
            }
        default:
            break
        }
    }
    return run
}

@Suite(.serialized) struct LiveChainTests {
    let data = TestPaths.dataDir
    var matanyone2: String {
        "matanyone name=m engine=matanyone2 precision=fp32 model-dir=\"\(TestPaths.modelDir)\" working-size=144 warmup=0 seed=mask "
            + "seed-mask=\"\(data)/test-sample2-mask-512x288.png\" stats-interval=1"
    }
    let liveSource = "videotestsrc is-live=true pattern=ball num-buffers=300 ! video/x-raw,format=BGRA,width=640,height=360,framerate=30/1"
    let videoSink = "fakesink name=sink sync=true max-lateness=20000000 qos=true"

    /// MatAnyone2 is slower than the 30 fps source: frames that could only reach the sink late are
    /// dropped before any work, and what the element does finish reaches the sink in time. (Ten
    /// seconds of source: at 5 % a run needs tens of frames for a machine's odd slow frame to fit.)
    @Test func predictiveQoSDropsBeforeWorkNotAfter() {
        let run = runLive("\(liveSource) ! \(matanyone2) ! video/x-raw,format=GRAY8 ! \(videoSink)")
        #expect(run.error == nil, "\(run.error ?? "")")
        #expect(run.reachedEOS)
        #expect(run.processed >= 10)
        #expect(run.elementDrops > 0, "a 30 fps source into a slower element must drop")
        // The pipeline configures its latency only once the first frame reached the sink: the one
        // or two frames in flight before may be late.
        #expect(run.sinkDropsAtStart <= 2, "the sink dropped \(run.sinkDropsAtStart) of the first frames")
        // After that, the latency reported is the 95th percentile of what a frame costs, and a frame
        // is admitted only when it can be done in time: ≤ 5 % (and at least one) arrive late. Not
        // under ThreadSanitizer, whose slowdown is neither steady nor what a user runs.
        let late = run.sinkDrops - run.sinkDropsAtStart
        print("predictive QoS: \(run.processed) frames processed, \(run.elementDrops) dropped before work, "
              + "\(run.sinkDropsAtStart) + \(late) late at the sink (first frames + after)")
        if !underThreadSanitizer {
            #expect(late <= max(1, run.processed / 20), "the sink dropped \(late) of \(run.processed) processed frames after the first")
        }
        // The track survived the drops (a DISCONT after each): it seeded once.
        #expect(run.stats.filter { $0["seed-ms"] != nil }.count == 1)
    }

    private func values(_ run: LiveRun, _ field: String) -> [Double] { run.stats.compactMap { $0[field].flatMap(Double.init) } }

    /// A live source long enough for any machine, stopped (EOS) once `until` holds.
    let longLiveSource = "videotestsrc is-live=true pattern=ball num-buffers=3000 ! video/x-raw,format=BGRA,width=640,height=360,framerate=30/1"

    private func framesWithAlpha(_ run: LiveRun) -> Int { run.stats.filter { $0["alpha-age-ms"] != nil }.count }

    /// mode=async: every frame leaves (none dropped by the element), each with the newest alpha;
    /// inference runs on its own thread at its own rate. (The models load on the inference thread
    /// after PLAYING: the run lasts until 100 frames have had an alpha.)
    @Test func asyncModeKeepsEveryFrame() {
        let run = runLive("\(longLiveSource) ! \(matanyone2) mode=async ! video/x-raw,format=BGRA ! \(videoSink)",
                          until: { framesWithAlpha($0) >= 100 })
        #expect(run.error == nil, "\(run.error ?? "")")
        #expect(run.reachedEOS)
        // Every frame that reached the element left it: none dropped, none stranded at EOS.
        #expect(run.processed >= 100 && run.stats.last?["frames-dropped"] == "0", "frames out: \(run.processed)")
        #expect(run.elementDrops == 0)
        let ages = values(run, "alpha-age-ms")
        // The models load on the inference thread while the first frames leave without an alpha;
        // from the first alpha on, every frame wears one.
        let firstWithAlpha = run.stats.firstIndex { $0["alpha-age-ms"] != nil } ?? run.stats.count
        #expect(ages.count >= 100 && ages.count == run.stats.count - firstWithAlpha,
                "frames with an alpha: \(ages.count) of \(run.stats.count - firstWithAlpha) after the first")
        #expect(ages.allSatisfy { $0 >= 0 })
        #expect(values(run, "inference-fps").last ?? 0 > 1)
        #expect(run.stats.allSatisfy { $0["mode"] == "async" })
        // The engine's figures come with the alpha used: its track, people and models' times.
        let tracked = run.stats.filter { $0["alpha-age-ms"] != nil }
        #expect(!tracked.isEmpty && tracked.allSatisfy { $0["seeded"] == "true" && $0["people"] == "1" })
        #expect(values(run, "memory-frames").max() ?? 0 >= 1)
        #expect(values(run, "decoder-ms").max() ?? 0 > 0 && values(run, "person-1-ms").max() ?? 0 > 0)
    }

    /// With async-delay at least the inference time, a frame that was inferred leaves with its own
    /// alpha (age 0), and the delay is part of the reported latency.
    @Test func asyncDelayGivesInferredFramesTheirOwnAlpha() {
        let ownAlphas = { (run: LiveRun) in run.stats.filter { $0["alpha-age-ms"].flatMap(Double.init) == 0 }.count }
        let run = runLive("\(longLiveSource) ! \(matanyone2) mode=async async-delay=1500 ! video/x-raw,format=GRAY8 ! \(videoSink)",
                          until: { ownAlphas($0) >= 5 && framesWithAlpha($0) >= 60 })
        #expect(run.error == nil, "\(run.error ?? "")")
        #expect(run.reachedEOS)
        #expect(run.processed >= 60 && run.stats.last?["frames-dropped"] == "0", "frames out: \(run.processed)")
        // Long before the source's own end (3000 frames): the inferred frames wore their own alpha as
        // they went, not only those the drain at EOS let go.
        #expect(run.processed < 1500, "own alphas came only after \(run.processed) frames")
        let ages = values(run, "alpha-age-ms")
        #expect(ages.filter { $0 == 0 }.count >= 5, "frames that left with their own alpha: \(ages.filter { $0 == 0 }.count)")
        #expect(values(run, "latency-ms").last ?? 0 >= 1500)
    }

    /// Caps of another size, a flush and EOS reach across the thread boundary: every frame pushed
    /// comes out, at the size of its caps.
    @Test func asyncModeAcrossCapsFlushAndEOS() throws {
        precondition(gstreamerReady)
        let harness = gst_harness_new_parse("\(matanyone2) mode=async async-delay=200")!
        defer { gst_harness_teardown(harness) }
        gst_harness_set_sink_caps_str(harness, "video/x-raw,format=GRAY8")
        func push(_ width: Int, _ height: Int, _ count: Int) {
            for index in 0..<count {
                let buffer = gst_buffer_new_allocate(nil, gsize(width * height * 4), nil)!
                gst_buffer_memset(buffer, 0, UInt8(40 + index), gsize(width * height * 4))
                buffer.pointee.pts = GstClockTime(index) * 40_000_000
                #expect(gst_harness_push(harness, buffer) == GST_FLOW_OK)
            }
        }
        func pullAll() -> [Int] {
            var sizes: [Int] = []
            while let buffer = gst_harness_try_pull(harness) {
                sizes.append(Int(gst_buffer_get_size(buffer)))
                gst_buffer_unref(buffer)
            }
            return sizes
        }
        gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=320,height=180,framerate=25/1")
        push(320, 180, 6)
        gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=160,height=96,framerate=25/1")
        push(160, 96, 4)
        #expect(gst_harness_push_event(harness, gst_event_new_flush_start()) != 0)
        #expect(gst_harness_push_event(harness, gst_event_new_flush_stop(1)) != 0)
        var segment = GstSegment()
        gst_segment_init(&segment, GST_FORMAT_TIME)
        #expect(gst_harness_push_event(harness, gst_event_new_segment(&segment)) != 0)
        push(160, 96, 3)
        #expect(gst_harness_push_event(harness, gst_event_new_eos()) != 0)
        let sizes = pullAll()
        // The first six left at 320×180 before the new caps; of the rest, the flush may have
        // discarded some still held; the three after it left at EOS.
        #expect(sizes.prefix(6).allSatisfy { $0 == 320 * 180 }, "\(sizes)")
        #expect(sizes.dropFirst(6).allSatisfy { $0 == 160 * 96 }, "\(sizes)")
        #expect(sizes.count >= 9 && sizes.count <= 13, "\(sizes.count) frames out")
    }
}
