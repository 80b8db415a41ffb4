import CGStreamer
import Foundation
import Testing
import MatteElement
import MattePixels
import TestPaths

/// The element inside real parsed pipelines, registered statically in this process.
@Suite(.serialized) struct ElementPipelineTests {
    let element = TestPaths.element
    let realFrames = "filesrc location=\"\(TestPaths.dataDir)/test-sample2-512x288.bgra\" ! "
        + "rawvideoparse format=bgra width=512 height=288 framerate=25/1"

    private func synthetic(_ count: Int, _ width: Int = 64, _ height: Int = 48) -> String {
        "videotestsrc num-buffers=\(count) pattern=ball ! video/x-raw,format=BGRA,width=\(width),height=\(height),framerate=30/1"
    }

    @Test func gray8NegotiatesWithNoPropertySet() {
        let run = runPipeline("\(synthetic(3)) ! \(element) ! video/x-raw,format=GRAY8 ! appsink name=out sync=false")
        #expect(run.error == nil, "\(String(describing: run.error))")
        #expect(run.reachedEOS)
        #expect(run.samples.count == 3)
        #expect(run.samples.allSatisfy { $0.count == 64 * 48 })
        #expect(run.caps.first?.contains("GRAY8") == true)
    }

    @Test(arguments: ["BGRA", "RGBA"])
    func compositeFormatsNegotiate(format: String) {
        let run = runPipeline("\(synthetic(2)) ! \(element) ! video/x-raw,format=\(format) ! appsink name=out sync=false")
        #expect(run.error == nil)
        #expect(run.samples.count == 2 && run.samples.allSatisfy { $0.count == 64 * 48 * 4 })
        #expect(run.caps.first?.contains(format) == true)
    }

    @Test func unconstrainedDownstreamGetsTheBGRAComposite() {
        let run = runPipeline("\(synthetic(1)) ! \(element) ! appsink name=out sync=false")
        #expect(run.error == nil)
        #expect(run.caps.first?.contains("BGRA") == true)
    }

    @Test func outputAlphaRefusesCompositeCaps() {
        let run = runPipeline("\(synthetic(2)) ! \(element) output=alpha ! video/x-raw,format=BGRA ! fakesink")
        #expect(run.error != nil)
        #expect(!run.reachedEOS)
    }

    @Test func outputCompositeRefusesGray8() {
        let run = runPipeline("\(synthetic(2)) ! \(element) output=composite ! video/x-raw,format=GRAY8 ! fakesink")
        #expect(run.error != nil)
    }

    @Test func nonBGRAInputIsRefusedAtNegotiation() {
        let run = runPipeline("videotestsrc num-buffers=2 ! video/x-raw,format=I420,width=64,height=48 ! \(element) ! fakesink")
        #expect(run.error != nil)
        // gst_parse_launch links lazily: the refusal shows as not-linked there, not-negotiated elsewhere.
        let debug = run.error?.debug ?? ""
        #expect(debug.contains("not-negotiated") || debug.contains("not-linked"), "\(String(describing: run.error))")
    }

    /// Composite = input colours + matte, checked pixel by pixel against the GRAY8 run on real frames.
    @Test func compositeIsTheFrameWithTheMatte() throws {
        let input = runPipeline("\(realFrames) ! identity eos-after=3 ! appsink name=out sync=false")
        let alpha = runPipeline("\(realFrames) ! identity eos-after=3 ! \(element) ! video/x-raw,format=GRAY8 ! appsink name=out sync=false")
        // Plain blending (edge-colors=original): the frame's own pixels, exactly.
        let plain = "\(element) edge-colors=original"
        let straight = runPipeline("\(realFrames) ! identity eos-after=3 ! \(plain) background=none ! video/x-raw,format=BGRA ! appsink name=out sync=false")
        let rgba = runPipeline("\(realFrames) ! identity eos-after=3 ! \(plain) background=none ! video/x-raw,format=RGBA ! appsink name=out sync=false")
        let overBlue = runPipeline("\(realFrames) ! identity eos-after=3 ! \(plain) background=color background-color=0xff0000ff ! video/x-raw,format=BGRA ! appsink name=out sync=false")
        // The default estimates the person's colour where the matte is soft, and only there.
        let estimated = runPipeline("\(realFrames) ! identity eos-after=3 ! \(element) background=none ! video/x-raw,format=BGRA ! appsink name=out sync=false")
        for run in [input, alpha, straight, rgba, overBlue, estimated] { #expect(run.error == nil && run.samples.count >= 2) }
        let cleaned = try #require(estimated.samples.first)
        let frame = try #require(input.samples.first), matte = try #require(alpha.samples.first)
        let composite = try #require(straight.samples.first), swapped = try #require(rgba.samples.first)
        let flattened = try #require(overBlue.samples.first)
        // The matte is not trivial on a frame with a person.
        #expect(matte.contains { $0 > 200 } && matte.contains { $0 < 50 })
        var worst = 0
        for pixel in 0..<(512 * 288) {
            let a = Int(matte[pixel])
            #expect(composite[4 * pixel + 3] == matte[pixel])
            if composite[4 * pixel] != frame[4 * pixel] || swapped[4 * pixel] != frame[4 * pixel + 2]
                || swapped[4 * pixel + 2] != frame[4 * pixel] || swapped[4 * pixel + 3] != matte[pixel] {
                worst = 255
            }
            // Over opaque blue: B = b·a + 255·(1−a), G = g·a, R = r·a; opaque.
            let expectedBlue = (Int(frame[4 * pixel]) * a + 255 * (255 - a) + 127) / 255
            let expectedRed = (Int(frame[4 * pixel + 2]) * a + 127) / 255
            worst = max(worst, abs(Int(flattened[4 * pixel]) - expectedBlue), abs(Int(flattened[4 * pixel + 2]) - expectedRed))
            if flattened[4 * pixel + 3] != 255 { worst = 255 }
        }
        #expect(worst <= 1, "largest deviation \(worst)")
        var softChanged = 0
        for pixel in 0..<(512 * 288) {
            #expect(cleaned[4 * pixel + 3] == matte[pixel])
            let changed = (0..<3).contains { cleaned[4 * pixel + $0] != frame[4 * pixel + $0] }
            if matte[pixel] == 255 && changed { worst = 255 }
            if matte[pixel] > 0 && matte[pixel] < 255 && changed { softChanged += 1 }
        }
        #expect(worst <= 1, "an opaque pixel changed colour")
        #expect(softChanged > 100, "edge-colors=estimated changed \(softChanged) soft pixels")
    }

    @Test func blurBackgroundKeepsThePersonAndSoftensTheRest() throws {
        let input = runPipeline("\(realFrames) ! identity eos-after=2 ! appsink name=out sync=false")
        let alpha = runPipeline("\(realFrames) ! identity eos-after=2 ! \(element) ! video/x-raw,format=GRAY8 ! appsink name=out sync=false")
        let blurred = runPipeline("\(realFrames) ! identity eos-after=2 ! \(element) background=blur ! video/x-raw,format=BGRA ! appsink name=out sync=false")
        let frame = try #require(input.samples.first), matte = try #require(alpha.samples.first)
        let out = try #require(blurred.samples.first)
        var foregroundError = 0.0, foregroundCount = 0, backgroundChange = 0.0, backgroundCount = 0
        for pixel in 0..<(512 * 288) {
            let difference = abs(Double(out[4 * pixel + 1]) - Double(frame[4 * pixel + 1]))
            if matte[pixel] == 255 { foregroundError += difference; foregroundCount += 1 }
            if matte[pixel] == 0 { backgroundChange += difference; backgroundCount += 1 }
            #expect(out[4 * pixel + 3] == 255)
        }
        #expect(foregroundCount > 0 && backgroundCount > 0)
        #expect(foregroundError / Double(max(foregroundCount, 1)) < 0.5)
        #expect(backgroundChange / Double(max(backgroundCount, 1)) > 1.0)
    }

    @Test func statsMessagesCarryEveryField() throws {
        let run = runPipeline("\(realFrames) ! identity eos-after=5 ! \(element) stats-interval=1 ! video/x-raw,format=GRAY8 ! fakesink")
        #expect(run.error == nil)
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(stats.count == 4)
        for field in ["frame", "pts", "preprocess-ms", "inference-ms", "postprocess-ms", "total-ms", "engine",
                      "frames-dropped", "segmenter-ms", "seeded", "memory-frames", "memory-ms", "latency-ms", "provider", "data"] {
            #expect(stats.allSatisfy { $0[field] != nil }, "missing \(field)")
        }
        #expect(stats.map { $0["frame"] } == ["1", "2", "3", "4"])
        #expect(stats.first?["engine"] == "segmenter")
        #expect(stats.allSatisfy { $0["provider"] == "cpu" && $0["data"] == "host" })
        // Which build of the pixel kernels ran: the widest this CPU has (or what MATANYONE_PIXEL_ISA asked).
        #expect(stats.allSatisfy { $0["pixel-isa"] == PixelISA.active.description })
        let first = try #require(stats.first)
        let total = try #require(Double(first["total-ms"] ?? "")), inference = try #require(Double(first["inference-ms"] ?? ""))
        #expect(total >= inference && inference > 0)
        #expect(first["frames-dropped"] == "0")
    }

    @Test func statsIntervalThinsTheMessages() {
        let run = runPipeline("\(synthetic(6)) ! \(element) stats-interval=2 ! fakesink")
        #expect(run.elementMessages.filter { $0["name"] == "matanyone-stats" }.map { $0["frame"] } == ["2", "4", "6"])
        let silent = runPipeline("\(synthetic(3)) ! \(element) ! fakesink")
        #expect(silent.elementMessages.filter { $0["name"] == "matanyone-stats" }.isEmpty)
    }

    @Test func latencyQueryAddsTheMeasuredCost() throws {
        var upstream: GstClockTime = 0, downstream: GstClockTime = 0
        let run = runPipeline(
            "videotestsrc is-live=true num-buffers=40 pattern=ball ! video/x-raw,format=BGRA,width=320,height=240,framerate=30/1 "
                + "! identity name=before ! \(element) name=m ! fakesink sync=false",
            whilePlaying: { pipeline in
                Thread.sleep(forTimeInterval: 0.5)
                let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
                for (name, padName, store) in [("before", "src", 0), ("m", "src", 1)] {
                    let element = gst_bin_get_by_name(bin, name)!
                    let pad = gst_element_get_static_pad(element, padName)!
                    let query = gst_query_new_latency()!
                    if gst_pad_query(pad, query) != 0 {
                        var live: gboolean = 0, minimum: GstClockTime = 0, maximum: GstClockTime = 0
                        gst_query_parse_latency(query, &live, &minimum, &maximum)
                        if store == 0 { upstream = minimum } else { downstream = minimum }
                    }
                    gst_query_unref(query)
                    gst_object_unref(pad)
                    gst_object_unref(element)
                }
            })
        #expect(run.error == nil)
        let ours = Double(downstream) - Double(upstream)
        // A real measurement: more than nothing, less than a second for a 320×240 segmenter frame.
        #expect(ours > 100_000 && ours < 1_000_000_000, "element latency \(ours) ns")
    }

    @Test func missingModelFolderIsResourceNotFound() throws {
        let run = runPipeline("\(synthetic(2)) ! matanyone model-dir=/nonexistent/models ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-resource-error-quark")
        #expect(error.code == Int32(GST_RESOURCE_ERROR_NOT_FOUND.rawValue))
        #expect(error.message.contains("/nonexistent/models") && error.message.contains("scripts/setup.sh"))
        // The debug line names where the element failed, not the error choke point's own file.
        #expect(error.debug.contains("MatteFilter.swift") && !error.debug.contains("ErrorMapping.swift"), "\(error.debug)")
    }

    @Test func absentRuntimeIsLibraryInit() throws {
        let run = runPipeline("\(synthetic(2)) ! \(element) runtime-library=/nonexistent/libonnxruntime.so.1 ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-library-error-quark")
        #expect(error.code == Int32(GST_LIBRARY_ERROR_INIT.rawValue))
        #expect(error.message.contains("/nonexistent/libonnxruntime.so.1"))
    }

    @Test func unavailableExecutionProviderIsASettingsError() throws {
        let run = runPipeline("\(synthetic(2)) ! \(element) execution-provider=cuda ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-library-error-quark")
        #expect(error.code == Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
        #expect(error.message.contains("execution-provider=cuda") && error.message.contains("CPUExecutionProvider"))
    }

    @Test func autoExecutionProviderFallsBackToCPUWithAWarning() {
        let run = runPipeline("\(synthetic(2)) ! \(element) execution-provider=auto stats-interval=1 ! fakesink")
        #expect(run.error == nil)
        #expect(run.reachedEOS)
        #expect(run.warnings.filter { $0.contains("execution-provider=auto runs on the CPU") }.count == 1)
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(!stats.isEmpty && stats.allSatisfy { $0["provider"] == "cpu" })
    }

    /// The GPU build of ONNX Runtime scripts/test.sh installs with only cudart and curand, on a
    /// machine without an NVIDIA driver: cuda is LIBRARY/INIT naming each missing piece and its fix.
    @Test func cudaWithoutItsLibrariesOrDriverIsLibraryInitNamingEachFix() throws {
        let gpuRuntime = TestPaths.dataDir + "/../test-gpu-runtime/libonnxruntime.so.1"
        let run = runPipeline("\(synthetic(2)) ! \(element) runtime-library=\"\(gpuRuntime)\" execution-provider=cuda ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-library-error-quark")
        #expect(error.code == Int32(GST_LIBRARY_ERROR_INIT.rawValue))
        for fragment in ["execution-provider=cuda cannot run", "libcublas.so.13", "(PyPI wheel nvidia-cublas)", "libcudnn.so.9",
                         "scripts/setup.sh --gpu"] {
            #expect(error.message.contains(fragment), "\(fragment) not in: \(error.message)")
        }
        if !FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.1") {
            #expect(error.message.contains("no NVIDIA driver"))
        }
        // auto on the same runtime: the CPU, one warning with the same reasons, provider=cpu in the stats.
        let auto = runPipeline("\(synthetic(2)) ! \(element) runtime-library=\"\(gpuRuntime)\" execution-provider=auto "
                               + "stats-interval=1 ! fakesink")
        #expect(auto.error == nil && auto.reachedEOS)
        #expect(auto.warnings.filter { $0.contains("runs on the CPU") && $0.contains("libcublas.so.13") }.count == 1)
        let stats = auto.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(!stats.isEmpty && stats.allSatisfy { $0["provider"] == "cpu" })
    }

    @Test func corruptModelIsLibraryInit() throws {
        let directory = TestPaths.scratch("corrupt-models")
        let source = TestPaths.modelDir + "/segmenter"
        try FileManager.default.createDirectory(atPath: directory + "/segmenter", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: source + "/manifest.json", toPath: directory + "/segmenter/manifest.json")
        try Data(repeating: 0x42, count: 4096).write(to: URL(fileURLWithPath: directory + "/segmenter/selfie_segmentation.onnx"))
        let run = runPipeline("\(synthetic(2)) ! matanyone model-dir=\"\(directory)\" ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-library-error-quark")
        #expect(error.code == Int32(GST_LIBRARY_ERROR_INIT.rawValue))
        #expect(error.message.contains("selfie_segmentation.onnx"))
    }

    @Test(arguments: [(17, 9), (4096, 2160), (1, 1)])
    func oddSizesWork(size: (Int, Int)) {
        let (width, height) = size
        let run = runPipeline("\(synthetic(2, width, height)) ! \(element) ! video/x-raw,format=GRAY8 ! appsink name=out sync=false",
                              timeout: 120)
        #expect(run.error == nil)
        #expect(run.samples.count == 2)
        // GRAY8 rows are padded to 4 bytes.
        #expect(run.samples.allSatisfy { $0.count == ((width + 3) / 4 * 4) * height })
    }

    @Test func flushingSeekAndEOS() {
        var seeked = false
        let run = runPipeline(
            "\(realFrames) ! \(element) ! video/x-raw,format=GRAY8 ! fakesink sync=true",
            whilePlaying: { pipeline in
                Thread.sleep(forTimeInterval: 0.2)
                seeked = gst_element_seek_simple(
                    pipeline, GST_FORMAT_TIME,
                    GstSeekFlags(rawValue: GST_SEEK_FLAG_FLUSH.rawValue | GST_SEEK_FLAG_ACCURATE.rawValue),
                    gint64(1_000_000_000)) != 0
            })
        #expect(seeked)
        #expect(run.error == nil)
        #expect(run.reachedEOS)
    }

    /// gpu-device: declared with its range, READY-only, and of no concern to the CPU provider.
    @Test func gpuDeviceIsARangedReadyPropertyTheCpuIgnores() throws {
        precondition(gstreamerReady)
        let factory = try #require(gst_element_factory_make("matanyone", nil))
        gst_object_ref_sink(factory)
        defer { gst_object_unref(factory) }
        let spec = try #require(g_object_class_find_property(
            UnsafeMutableRawPointer(factory).assumingMemoryBound(to: GTypeInstance.self).pointee.g_class
                .withMemoryRebound(to: GObjectClass.self, capacity: 1) { $0 }, "gpu-device"))
        let range = UnsafeMutableRawPointer(spec).assumingMemoryBound(to: GParamSpecUInt.self).pointee
        #expect(range.minimum == 0 && range.maximum == 63 && range.default_value == 0)
        let run = runPipeline("\(synthetic(3)) ! \(element) gpu-device=5 ! video/x-raw,format=GRAY8 ! fakesink")
        #expect(run.error == nil && run.reachedEOS)
    }

    @Test func readyOnlyPropertyIsRefusedWhilePlaying() {
        let run = runPipeline(
            "\(synthetic(60)) ! \(element) name=m ! fakesink sync=true",
            whilePlaying: { pipeline in
                let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
                let element = gst_bin_get_by_name(bin, "m")!
                gst_util_set_object_arg(UnsafeMutableRawPointer(element).assumingMemoryBound(to: GObject.self), "engine", "segmenter")
                gst_object_unref(element)
            })
        #expect(run.error == nil)
        #expect(run.warnings.contains { $0.contains("engine") && $0.contains("READY") })
    }
}
