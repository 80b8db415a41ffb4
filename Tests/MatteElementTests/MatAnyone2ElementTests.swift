import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import MatteEngine
import TestPaths

/// engine=matanyone2 precision=fp32 inside real pipelines, on the random-init model set scripts/test.sh exports.
@Suite(.serialized) struct MatAnyone2ElementTests {
    let data = TestPaths.dataDir
    var clip: String { (ProcessInfo.processInfo.environment["MATANYONE_SHARED"] ?? "\(TestPaths.dataDir)/../../../shared") + "/media/test-sample2.mp4" }
    var mask: String { "\(data)/test-sample2-mask-512x288.png" }
    var element: String { "matanyone engine=matanyone2 precision=fp32 model-dir=\"\(TestPaths.modelDir)\"" }
    var realFrames: String {
        "filesrc location=\"\(data)/test-sample2-512x288.bgra\" ! rawvideoparse format=bgra width=512 height=288 framerate=25/1"
    }

    /// The issue's pipeline: decode, scale to 512×288, matte, appsink; GRAY8 against the upstream
    /// reference up to 8-bit rounding.
    @Test func parityThroughARealPipeline() throws {
        let reference = try TestPaths.loadNpy("matanyone2-reference.npy")
        let frameSize = 512 * 288
        let count = min(reference.count / frameSize, 30)
        let run = runPipeline(
            "filesrc location=\"\(clip)\" ! decodebin ! videoconvert ! videoscale ! video/x-raw,format=BGRA,width=512,height=288 "
                + "! identity eos-after=\(count + 1) ! \(element) seed=mask seed-mask=\"\(mask)\" stats-interval=1 "
                + "! video/x-raw,format=GRAY8 ! appsink name=out sync=false", timeout: 600)
        #expect(run.error == nil, "\(String(describing: run.error))")
        #expect(run.samples.count >= count)
        var worstExcess = 0.0, worstMax = 0.0
        for index in 0..<min(count, run.samples.count) {
            let ours = run.samples[index]
            var total = 0.0, rounding = 0.0, maximum = 0.0
            for pixel in 0..<frameSize {
                let r = Double(reference[index * frameSize + pixel])
                let difference = abs(Double(ours[pixel]) / 255 - r)
                maximum = max(maximum, difference)
                total += difference
                rounding += abs((r * 255).rounded() / 255 - r)
            }
            // 8-bit output: at most half a step plus the engine tolerance; on average no further
            // from the reference than the reference's own rounding, plus the engine tolerance.
            #expect(maximum <= 1e-3 + 0.5 / 255, "frame \(index): max |Δ| \(maximum)")
            let excess = (total - rounding) / Double(frameSize)
            #expect(excess <= 1e-4, "frame \(index): mean |Δ| beyond rounding \(excess)")
            worstExcess = max(worstExcess, excess)
            worstMax = max(worstMax, maximum)
        }
        print("element parity: worst max |Δ| \(worstMax), worst mean excess over 8-bit rounding \(worstExcess)")
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(stats.first?["engine"] == "matanyone2")
        #expect(stats.first?["seeded"] == "true")
        #expect(stats.first?["seed-ms"] != nil)
        for field in ["encoder-ms", "uncert-ms", "readout-ms", "decoder-ms", "maskencoder-ms", "memframe-ms", "memory-ms",
                      "memory-frames"] {
            #expect(stats.allSatisfy { $0[field] != nil }, "missing \(field)")
        }
        #expect(stats.map { $0["memory-frames"] ?? "" }.contains("5"))
    }

    /// model-dir straight at the MatAnyone2 set with seed=auto: the segmenter beside it seeds.
    @Test func modelDirAtTheSetItselfSeedsAutomatically() throws {
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! matanyone engine=matanyone2 "
                              + "model-dir=\"\(TestPaths.modelDir)/matanyone2\" working-size=144 warmup=0 stats-interval=1 ! fakesink")
        #expect(run.error == nil, "\(run.error?.message ?? "")")
        // (precision=auto, the default: the set named runs as it is.)
        #expect(run.elementMessages.contains { $0["name"] == "matanyone-stats" && $0["engine"] == "matanyone2" && $0["precision"] == "fp32" })
    }

    @Test func engineAutoPicksMatAnyone2WhenItsSetIsInstalled() throws {
        let run = runPipeline("videotestsrc num-buffers=1 pattern=black ! video/x-raw,format=BGRA,width=64,height=48 "
                              + "! matanyone model-dir=\"\(TestPaths.modelDir)\" precision=fp32 stats-interval=1 ! fakesink")
        #expect(run.error == nil)
        #expect(run.elementMessages.first { $0["name"] == "matanyone-stats" }?["engine"] == "matanyone2")
    }

    /// precision=auto is the default and runs what AutoPrecision chooses for this machine and folder
    /// (bf16 on a CPU where it pays with the bf16 set and the OpenVINO build, else fp32); the stats say
    /// which ran.
    @Test func precisionAutoIsTheDefaultAndRunsWhatItChooses() throws {
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! matanyone engine=matanyone2 model-dir=\"\(TestPaths.modelDir)\" "
                              + "warmup=1 stats-interval=1 ! fakesink")
        #expect(run.error == nil, "\(String(describing: run.error))")
        let expected = AutoPrecision.choose(EngineOptions(modelDir: TestPaths.modelDir)).precision.rawValue
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(!stats.isEmpty && stats.allSatisfy { $0["precision"] == expected }, "\(stats.first ?? [:]), expected \(expected)")
    }

    /// Where auto chooses bf16 and the bf16 set fails to load (its files corrupt here), fp32 runs with a
    /// WARNING saying why; where auto chooses fp32 (no bf16 CPU, no OpenVINO build) fp32 runs silently.
    @Test func precisionAutoFallsBackToFp32WhenBf16FailsToLoad() throws {
        let directory = TestPaths.scratch("auto-bf16-broken")
        for set in ["matanyone2", "segmenter"] {
            try FileManager.default.createSymbolicLink(atPath: directory + "/" + set, withDestinationPath: TestPaths.modelDir + "/" + set)
        }
        let broken = directory + "/matanyone2-bf16"
        try FileManager.default.createDirectory(atPath: broken, withIntermediateDirectories: true)
        let fp32Set = TestPaths.modelDir + "/matanyone2"
        for file in try FileManager.default.contentsOfDirectory(atPath: fp32Set) {
            let data = file.hasSuffix(".onnx") ? Data("not a model".utf8) : try Data(contentsOf: URL(fileURLWithPath: fp32Set + "/" + file))
            try data.write(to: URL(fileURLWithPath: broken + "/" + file))
        }
        let choice = AutoPrecision.choose(EngineOptions(modelDir: directory))
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! matanyone engine=matanyone2 model-dir=\"\(directory)\" "
                              + "warmup=0 stats-interval=1 ! fakesink")
        #expect(run.error == nil, "\(String(describing: run.error))")
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(!stats.isEmpty && stats.allSatisfy { $0["precision"] == "fp32" }, "\(stats.first ?? [:])")
        let fellBack = run.warnings.filter { $0.contains("precision=auto chose bf16") && $0.contains("running fp32") }
        #expect(fellBack.count == (choice.precision == .bf16 ? 1 : 0), "\(choice.reason); \(run.warnings)")
    }

    @Test func int8PrecisionRunsTheQuantizedSet() throws {
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! \(element) precision=int8 warmup=0 stats-interval=1 ! fakesink")
        #expect(run.error == nil)
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(!stats.isEmpty && stats.allSatisfy { $0["precision"] == "int8" && $0["engine"] == "matanyone2" })
    }

    @Test func missingInt8SetIsNotFoundWithTheCommandThatMakesIt() throws {
        let directory = TestPaths.scratch("fp32-only")
        try FileManager.default.createSymbolicLink(atPath: directory + "/matanyone2",
                                                   withDestinationPath: TestPaths.modelDir + "/matanyone2")
        try FileManager.default.createSymbolicLink(atPath: directory + "/segmenter",
                                                   withDestinationPath: TestPaths.modelDir + "/segmenter")
        let run = runPipeline("\(realFrames) ! matanyone model-dir=\"\(directory)\" precision=int8 ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-resource-error-quark")
        #expect(error.code == Int32(GST_RESOURCE_ERROR_NOT_FOUND.rawValue))
        #expect(error.message.contains("matanyone2-int8") && error.message.contains("tools.matanyone2.quantize"))
    }

    @Test func int8SetRunAsFp32IsRefusedNamingThePrecision() throws {
        let run = runPipeline("\(realFrames) ! matanyone engine=matanyone2 precision=fp32 "
                              + "model-dir=\"\(TestPaths.modelDir)/matanyone2-int8\" ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-library-error-quark")
        #expect(error.code == Int32(GST_LIBRARY_ERROR_INIT.rawValue))
        #expect(error.message.contains("int8 set") && error.message.contains("precision=int8"))
    }

    /// The quality watch, forced to find drift (an IoU of 100 % is never reached): each action is a
    /// `matanyone-reseeded` message; the stats carry the people tracked and the watch's IoU.
    @Test func theWatchPostsReseededMessages() throws {
        let run = runPipeline(
            "\(realFrames) ! identity eos-after=6 ! \(element) seed=auto warmup=0 stats-interval=1 "
                + "watch-interval=2 watch-iou=100 watch-patience=1 ! fakesink sync=false")
        #expect(run.error == nil)
        let reseeded = run.elementMessages.filter { $0["name"] == "matanyone-reseeded" }
        #expect(reseeded.count == 2, "\(reseeded)")
        #expect(reseeded.allSatisfy { $0["reason"] == "drift" && $0["person"] == "1" && Double($0["iou"] ?? "") != nil })
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(stats.allSatisfy { $0["people"] == "1" })
        #expect(stats.contains { Double($0["watch-iou"] ?? "").map { (0...1).contains($0) } ?? false })
        // The same run with the watch off, and with a seed mask (any object: the watch does not judge it).
        let quiet = runPipeline("\(realFrames) ! identity eos-after=6 ! \(element) seed=auto warmup=0 "
                                + "watch-interval=0 watch-iou=100 watch-patience=1 ! fakesink sync=false")
        #expect(!quiet.elementMessages.contains { $0["name"] == "matanyone-reseeded" })
        let masked = runPipeline("\(realFrames) ! identity eos-after=6 ! \(element) seed=mask seed-mask=\"\(mask)\" warmup=0 "
                                 + "watch-interval=2 watch-iou=100 watch-patience=1 ! fakesink sync=false")
        #expect(masked.error == nil && !masked.elementMessages.contains { $0["name"] == "matanyone-reseeded" })
    }

    /// Two people by grey level in the seed mask: stats list both with their own times.
    @Test func twoLabelledPeopleAreTrackedSeparately() throws {
        let folder = TestPaths.scratch("labels"), path = folder + "/two.png"
        // A box of grey 100 on the left, one of grey 200 on the right, encoded by GStreamer.
        var pixels = [UInt8](repeating: 0, count: 512 * 288)
        for y in 40..<240 { for x in 40..<200 { pixels[y * 512 + x] = 100 } }
        for y in 60..<200 { for x in 320..<440 { pixels[y * 512 + x] = 200 } }
        try Data(pixels).write(to: URL(fileURLWithPath: folder + "/two.gray"))
        _ = runPipeline("filesrc location=\"\(folder)/two.gray\" ! rawvideoparse format=gray8 width=512 height=288 "
                        + "! pngenc ! filesink location=\"\(path)\"")
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! \(element) seed=mask seed-mask=\"\(path)\" warmup=0 "
                              + "max-people=2 stats-interval=1 ! fakesink sync=false")
        #expect(run.error == nil, "\(String(describing: run.error))")
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(!stats.isEmpty && stats.allSatisfy { $0["people"] == "2" })
        #expect(stats.allSatisfy { Double($0["person-1-ms"] ?? "") != nil && Double($0["person-2-ms"] ?? "") != nil })
    }

    /// The latency answer is one frame's cost: the one-off seeding (11 passes) is not latency.
    @Test func latencyLeavesSeedingOut() throws {
        var answered: GstClockTime = 0
        let run = runPipeline(
            "\(realFrames) ! identity eos-after=6 ! \(element) name=m seed=mask seed-mask=\"\(mask)\" stats-interval=1 "
                + "! fakesink name=sink sync=false",
            before: { _ in },
            whilePlaying: { pipeline in
                let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
                let element = gst_bin_get_by_name(bin, "m")!
                let pad = gst_element_get_static_pad(element, "src")!
                // Wait until a few frames went through, then ask.
                for _ in 0..<600 where answered == 0 {
                    Thread.sleep(forTimeInterval: 0.1)
                    let query = gst_query_new_latency()!
                    if gst_pad_query(pad, query) != 0 {
                        var live: gboolean = 0, minimum: GstClockTime = 0, maximum: GstClockTime = 0
                        gst_query_parse_latency(query, &live, &minimum, &maximum)
                        answered = minimum
                    }
                    gst_query_unref(query)
                }
                gst_object_unref(pad)
                gst_object_unref(element)
            })
        #expect(run.error == nil)
        let seed = try #require(run.elementMessages.compactMap { $0["seed-ms"].flatMap(Double.init) }.first)
        #expect(answered > 0)
        #expect(Double(answered) / 1e6 < seed / 3, "latency \(Double(answered) / 1e6) ms vs seeding \(seed) ms")
        // After the seeding frame went through, the running percentile still leaves it out.
        let last = try #require(run.elementMessages.last { $0["name"] == "matanyone-stats" })
        let tracked = try #require(last["latency-ms"].flatMap(Double.init))
        #expect(tracked > 0 && tracked < seed / 3, "tracked latency \(tracked) ms vs seeding \(seed) ms")
    }

    @Test func passesFramesThroughUntilSeeded() throws {
        // A black frame holds no person: seed=auto waits, alpha stays 255, stats say seeded=false.
        let run = runPipeline(
            "videotestsrc num-buffers=3 pattern=black ! video/x-raw,format=BGRA,width=64,height=48 "
                + "! \(element) stats-interval=1 ! video/x-raw,format=GRAY8 ! appsink name=out sync=false")
        #expect(run.error == nil)
        #expect(run.samples.count == 3)
        #expect(run.samples.allSatisfy { $0.allSatisfy { $0 == 255 } })
        #expect(run.elementMessages.filter { $0["name"] == "matanyone-stats" }.allSatisfy { $0["seeded"] == "false" })
    }

    @Test func autoSeedingUsesTheSegmenter() throws {
        let run = runPipeline("\(realFrames) ! identity eos-after=4 ! \(element) warmup=1 stats-interval=1 ! fakesink")
        #expect(run.error == nil)
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(stats.first?["seeded"] == "true", "\(stats.first ?? [:])")
        #expect(stats.first?["segmenter-ms"].flatMap(Double.init) ?? 0 > 0)
    }

    @Test func memEveryZeroIsASettingsError() throws {
        let run = runPipeline("\(realFrames) ! \(element) mem-every=0 ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-library-error-quark")
        #expect(error.code == Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
        #expect(error.message.contains("mem-every"))
    }

    /// precision=bf16 through the element: it runs (stats say bf16) where this CPU computes bf16, and is
    /// LIBRARY/SETTINGS naming what to use instead where it does not.
    @Test func bf16RunsWhereTheCpuComputesItElseIsASettingsError() throws {
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! \(element) precision=bf16 warmup=1 stats-interval=1 ! fakesink")
        if CpuFeatures.current.bf16.isEmpty {
            let error = try #require(run.error)
            #expect(error.code == Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
            #expect(error.message.contains("precision=bf16") && error.message.contains("precision=fp32"))
        } else {
            #expect(run.error == nil, "\(String(describing: run.error))")
            let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
            #expect(stats.first?["precision"] == "bf16", "\(stats.first ?? [:])")
            // Where bf16 measured slower than fp32 (Intel without AMX) the user is told so, once.
            let slower = run.warnings.filter { $0.contains("precision=bf16") && $0.contains("slower than fp32") }
            #expect(slower.count == (CpuFeatures.current.bf16SlowerThanFp32 ? 1 : 0), "\(run.warnings)")
        }
    }

    /// model-placement through the element: the stats say where each model ran; a placement it cannot
    /// read, or one with the segmenter, is LIBRARY/SETTINGS naming what it takes.
    @Test func modelPlacementRunsWhereItSaysElseIsASettingsError() throws {
        try #require(FileManager.default.fileExists(atPath: OnnxRuntime.openvinoLibraryPath),
                     "scripts/setup.sh installs the OpenVINO build on x86-64")
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! \(element) model-placement=\"encoder=openvino, memframe=cpu\" "
                              + "warmup=0 stats-interval=1 ! fakesink")
        #expect(run.error == nil, "\(String(describing: run.error))")
        // (Serialised, the string is quoted with its "=" and "," escaped.)
        let placements = run.elementMessages.filter { $0["name"] == "matanyone-stats" }.map {
            ($0["model-placement"] ?? "").replacingOccurrences(of: "\\", with: "").trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        }
        #expect(!placements.isEmpty && placements.allSatisfy {
            $0 == "encoder=openvino,uncert=cpu,readout=cpu,decoder=cpu,maskencoder=cpu,memframe=cpu"
        }, "\(placements.first ?? "")")
        for (placement, engine, says) in [("encoder=gpu", "matanyone2", "'gpu'"), ("encoder=", "matanyone2", "MODEL=PLACEMENT"),
                                          ("encoder=cpu", "segmenter", "the engine is the segmenter")] {
            let refused = runPipeline("\(realFrames) ! matanyone engine=\(engine) model-dir=\"\(TestPaths.modelDir)\" "
                                      + "model-placement=\"\(placement)\" ! fakesink")
            let error = try #require(refused.error, "\(placement) with \(engine)")
            #expect(error.domain == "gst-library-error-quark" && error.code == Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
            #expect(error.message.contains("model-placement") && error.message.contains(says), "\(error.message)")
        }
    }

    @Test func bf16WithAGpuProviderIsASettingsError() throws {
        let run = runPipeline("\(realFrames) ! \(element) precision=bf16 execution-provider=cuda ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-library-error-quark")
        #expect(error.code == Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
        #expect(error.message.contains("precision=bf16"))
    }

    @Test func seedMaskModeNeedsAMask() throws {
        let run = runPipeline("\(realFrames) ! \(element) seed=mask ! fakesink")
        let error = try #require(run.error)
        #expect(error.code == Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
        #expect(error.message.contains("seed-mask"))
    }

    @Test func missingSeedMaskIsNotFound() throws {
        let run = runPipeline("\(realFrames) ! \(element) seed=mask seed-mask=/nonexistent/mask.png ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-resource-error-quark")
        #expect(error.code == Int32(GST_RESOURCE_ERROR_NOT_FOUND.rawValue))
        #expect(error.message.contains("/nonexistent/mask.png"))
    }

    @Test func unreadableSeedMaskIsAnError() throws {
        let path = TestPaths.scratch("bad-mask") + "/mask.png"
        try Data("not an image".utf8).write(to: URL(fileURLWithPath: path))
        let run = runPipeline("\(realFrames) ! \(element) seed=mask seed-mask=\"\(path)\" ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-resource-error-quark")
        #expect(error.message.contains(path))
    }

    /// Writes a PNG of the given size and grey level with GStreamer itself.
    private func writeMask(_ name: String, width: Int, height: Int, pattern: String) -> String {
        let path = TestPaths.scratch("masks") + "/\(name).png"
        _ = runPipeline("videotestsrc num-buffers=1 pattern=\(pattern) ! video/x-raw,format=GRAY8,width=\(width),height=\(height) "
                        + "! pngenc ! filesink location=\"\(path)\"")
        return path
    }

    @Test func emptySeedMaskWarnsAndFallsBackToTheSegmenter() throws {
        let path = writeMask("empty", width: 512, height: 288, pattern: "black")
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! \(element) warmup=0 seed=mask seed-mask=\"\(path)\" stats-interval=1 ! fakesink")
        #expect(run.error == nil)
        #expect(run.warnings.contains { $0.contains("no foreground") })
        #expect(run.elementMessages.contains { $0["seeded"] == "true" })
    }

    @Test func fullSeedMaskWarnsAndCarriesOn() throws {
        let path = writeMask("full", width: 512, height: 288, pattern: "white")
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! \(element) warmup=0 seed=mask seed-mask=\"\(path)\" ! fakesink")
        #expect(run.error == nil)
        #expect(run.warnings.contains { $0.contains("whole image") })
    }

    @Test func seedMaskOfAnotherSizeIsResized() throws {
        // The mask scaled to 256×144 still seeds 512×288 frames.
        let path = TestPaths.scratch("small-mask") + "/mask.png"
        _ = runPipeline("filesrc location=\"\(mask)\" ! decodebin ! videoconvert ! videoscale ! video/x-raw,format=GRAY8,width=256,height=144 "
                        + "! pngenc ! filesink location=\"\(path)\"")
        let run = runPipeline("\(realFrames) ! identity eos-after=3 ! \(element) warmup=0 seed=mask seed-mask=\"\(path)\" "
                              + "! video/x-raw,format=GRAY8 ! appsink name=out sync=false")
        #expect(run.error == nil)
        #expect(run.samples.count == 2)
        #expect(run.samples.first?.contains { $0 < 255 } == true)
    }

    @Test func reseedSignalAndEventsRestartTheTrack() throws {
        var emitted = false
        let run = runPipeline(
            "\(realFrames) ! identity eos-after=14 ! \(element) name=m warmup=0 stats-interval=1 ! fakesink name=sink sync=false",
            whilePlaying: { pipeline in
                let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
                let element = gst_bin_get_by_name(bin, "m")!
                shim_emit_reseed(element)
                // An upstream event from the sink side, with a mask.
                let structure = gst_structure_new_empty("matanyone-reseed")!
                shim_structure_set_string(structure, "mask", mask)
                let sink = gst_bin_get_by_name(bin, "sink")!
                emitted = gst_element_send_event(sink, gst_event_new_custom(GST_EVENT_CUSTOM_UPSTREAM, structure)) != 0
                gst_object_unref(sink)
                gst_object_unref(element)
            })
        #expect(run.error == nil)
        #expect(emitted)
        let seeds = run.elementMessages.filter { $0["name"] == "matanyone-stats" && $0["seed-ms"] != nil }
        #expect(seeds.count >= 2, "seeded \(seeds.count) times")
    }

    @Test func reseedEventBeforeTheFirstFrameIsHarmless() throws {
        precondition(gstreamerReady)
        let harness = gst_harness_new_parse("\(element) warmup=0 seed=mask seed-mask=\"\(mask)\"")!
        defer { gst_harness_teardown(harness) }
        gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=512,height=288,framerate=25/1")
        gst_harness_set_sink_caps_str(harness, "video/x-raw,format=GRAY8,width=512,height=288,framerate=25/1")
        #expect(gst_harness_push_upstream_event(harness, gst_event_new_custom(GST_EVENT_CUSTOM_UPSTREAM,
                                                                              gst_structure_new_empty("matanyone-reseed"))) != 0)
        #expect(gst_harness_push_event(harness, gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM,
                                                                     gst_structure_new_empty("matanyone-reseed"))) != 0)
        let frames = try Data(contentsOf: URL(fileURLWithPath: "\(data)/test-sample2-512x288.bgra"))
        let frame = [UInt8](frames.prefix(512 * 288 * 4))
        let buffer = gst_buffer_new_allocate(nil, gsize(frame.count), nil)!
        _ = frame.withUnsafeBufferPointer { gst_buffer_fill(buffer, 0, $0.baseAddress, gsize($0.count)) }
        #expect(gst_harness_push(harness, buffer) == GST_FLOW_OK)
        let out = gst_harness_pull(harness)
        #expect(out != nil)
        if let out { gst_buffer_unref(out) }
    }
}
