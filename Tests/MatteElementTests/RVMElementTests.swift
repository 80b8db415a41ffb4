import CGStreamer
import CGstCheck
import Foundation
import Testing
import MatteElement
import MatteEngine
import TestPaths

/// Robust Video Matting through the element: as the default (engine=auto where no MatAnyone2 set is
/// installed), in both modes, with its states started over by flushes and new caps. (precision=fp32
/// where OpenVINO is not the point: under ThreadSanitizer OpenVINO cannot load.)
@Suite(.serialized) struct RVMElementTests {
    /// A model folder as set-up leaves it without MatAnyone2: the segmenter and RVM.
    static let defaultSets: String = {
        let root = TestPaths.scratch("default-sets")
        for set in ["segmenter", "rvm"] {
            try? FileManager.default.createSymbolicLink(atPath: root + "/" + set, withDestinationPath: TestPaths.fullModelDir + "/" + set)
        }
        return root
    }()
    let realFrames = "filesrc location=\"\(TestPaths.dataDir)/test-sample2-512x288.bgra\" ! "
        + "rawvideoparse format=bgra width=512 height=288 framerate=25/1"

    private func reference() throws -> [[UInt8]] {
        let path = TestPaths.dataDir + "/rvm-reference-512x288.gray"
        let data = try #require(FileManager.default.contents(atPath: path), "missing \(path): run scripts/test.sh")
        return stride(from: 0, to: data.count - 512 * 288 + 1, by: 512 * 288).map { Array(data[$0..<$0 + 512 * 288]) }
    }

    /// The default chain on the dancer: engine=auto runs RVM; in fp32 each frame is within 1 LSB of
    /// Python ONNX Runtime's alpha of the same frame (the states carried through the element), and the
    /// stats say which engine ran.
    @Test func autoRunsRVMAndEveryFrameMatchesTheReference() throws {
        let run = runPipeline("\(realFrames) ! identity eos-after=41 ! matanyone model-dir=\"\(Self.defaultSets)\" precision=fp32 stats-interval=1 "
                              + "! video/x-raw,format=GRAY8 ! appsink name=out sync=false", timeout: 120)
        #expect(run.error == nil, "\(run.error?.message ?? "")")
        let expected = try reference()
        try #require(run.samples.count == 40)
        for (index, (got, want)) in zip(run.samples, expected).enumerated() {
            #expect(maxDifference(got, want) <= 1, "frame \(index)")
        }
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(!stats.isEmpty && stats.allSatisfy { $0["engine"] == "rvm" && $0["license"] == "GPL-3.0" })
        #expect(stats.allSatisfy { $0["rvm-ms"].flatMap(Double.init) ?? 0 > 0 })
        #expect(stats.first?["downsample-ratio"].flatMap(Double.init) == 0.9375)
    }

    /// precision=auto (the default) runs what AutoPrecision.chooseForRVM decides for this machine (bf16
    /// on CPUs where it pays, else fp32), and the stats say which; bf16, where it runs, is close to fp32.
    @Test func autoPrecisionRunsWhatTheRuleChooses() throws {
        let expected = AutoPrecision.chooseForRVM(EngineOptions(modelDir: Self.defaultSets)).precision
        let run = runPipeline("\(realFrames) ! identity eos-after=11 ! matanyone model-dir=\"\(Self.defaultSets)\" stats-interval=1 "
                              + "! video/x-raw,format=GRAY8 ! appsink name=out sync=false", timeout: 120)
        #expect(run.error == nil, "\(run.error?.message ?? "")")
        let stats = run.elementMessages.filter { $0["name"] == "matanyone-stats" }
        #expect(!stats.isEmpty && stats.allSatisfy { $0["engine"] == "rvm" && $0["precision"] == expected.rawValue })
        let reference = try reference()
        try #require(run.samples.count == 10)
        var total = 0
        for (got, want) in zip(run.samples, reference) {
            for (x, y) in zip(got, want) { total += abs(Int(x) - Int(y)) }
        }
        let mean = Double(total) / Double(10 * 512 * 288) / 255
        #expect(expected == .fp32 ? mean == 0 : (mean > 0 && mean < 0.01), "mean |dα| \(mean) from fp32 (\(expected.rawValue))")
    }

    /// Async mode at the clip's rate: every frame leaves, matted by RVM on the inference thread.
    @Test func asyncModeRunsRVM() throws {
        let run = runPipeline("\(realFrames) ! identity eos-after=30 ! identity sync=true ! matanyone engine=rvm precision=fp32 mode=async "
                              + "model-dir=\"\(Self.defaultSets)\" stats-interval=1 ! video/x-raw,format=GRAY8 ! appsink name=out sync=false",
                              timeout: 120)
        #expect(run.error == nil, "\(run.error?.message ?? "")")
        // (identity eos-after=N lets N-1 frames through.)
        #expect(run.samples.count == 29)
        #expect(run.elementMessages.contains { $0["name"] == "matanyone-stats" && $0["engine"] == "rvm" })
        // (The ratio comes with the alpha's report from the inference thread.)
        #expect(run.elementMessages.contains { $0["downsample-ratio"].flatMap(Double.init) == 0.9375 })
        // (Alphas came: not every frame left with the opaque alpha of before the first result.)
        #expect(run.samples.contains { $0.contains { $0 < 128 } })
    }

    /// A flush starts the states over: the frame after it gets a fresh engine's alpha, not the one the
    /// carried states give.
    @Test func aFlushStartsTheStatesOver() throws {
        let frame = try TestPaths.frames512()[0]
        let harness = gst_harness_new_parse("matanyone name=m engine=rvm precision=fp32 model-dir=\"\(Self.defaultSets)\"")!
        defer { gst_harness_teardown(harness) }
        gst_harness_set_src_caps_str(harness, "video/x-raw,format=BGRA,width=512,height=288,framerate=25/1")
        gst_harness_set_sink_caps_str(harness, "video/x-raw,format=GRAY8,width=512,height=288,framerate=25/1")
        func push() throws -> [UInt8] {
            let buffer = gst_buffer_new_allocate(nil, gsize(frame.count), nil)!
            _ = frame.withUnsafeBufferPointer { gst_buffer_fill(buffer, 0, $0.baseAddress, gsize($0.count)) }
            #expect(gst_harness_push(harness, buffer) == GST_FLOW_OK)
            let out = try #require(gst_harness_pull(harness))
            defer { gst_buffer_unref(out) }
            var map = GstMapInfo()
            gst_buffer_map(out, &map, GST_MAP_READ)
            defer { gst_buffer_unmap(out, &map) }
            return Array(UnsafeBufferPointer(start: map.data, count: Int(map.size)))
        }
        let first = try push()
        var carried = first
        for _ in 0..<4 { carried = try push() }
        #expect(carried != first, "the states carried nothing over five pushes of the frame")
        #expect(gst_harness_push_event(harness, gst_event_new_flush_start()) != 0)
        #expect(gst_harness_push_event(harness, gst_event_new_flush_stop(1)) != 0)
        var segment = GstSegment()
        gst_segment_init(&segment, GST_FORMAT_TIME)
        #expect(gst_harness_push_event(harness, gst_event_new_segment(&segment)) != 0)
        #expect(try push() == first)
    }

    /// New caps mid-stream (512×288, then 256×144): the new size runs with its own states, no error.
    @Test func aCapsChangeRunsTheNewSize() throws {
        let run = runPipeline("videotestsrc num-buffers=30 pattern=ball ! video/x-raw,format=BGRA,width=512,height=288,framerate=30/1 "
                              + "! identity sync=true ! videoscale ! capsfilter name=caps caps=video/x-raw,width=512,height=288 "
                              + "! matanyone engine=rvm precision=fp32 model-dir=\"\(Self.defaultSets)\" ! video/x-raw,format=GRAY8 "
                              + "! appsink name=out sync=false", timeout: 60,
                              whilePlaying: { pipeline in
                                  let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
                                  if let caps = gst_bin_get_by_name(bin, "caps") {
                                      let newCaps = gst_caps_from_string("video/x-raw,width=256,height=144")
                                      g_object_set_property_caps(caps, "caps", newCaps)
                                      gst_caps_unref(newCaps)
                                      gst_object_unref(caps)
                                  }
                              })
        #expect(run.error == nil, "\(run.error?.message ?? "")")
        #expect(run.reachedEOS)
        #expect(run.samples.count == 30)
        #expect(Set(run.samples.map(\.count)) == [512 * 288, 256 * 144])
        #expect(run.samples.last?.count == 256 * 144)
    }

    /// A ratio below the range is a settings error that names the range; downsample-ratio is a
    /// READY-time double property.
    @Test func anOutOfRangeRatioIsASettingsError() throws {
        let run = runPipeline("videotestsrc num-buffers=2 ! video/x-raw,format=BGRA,width=64,height=48 "
                              + "! matanyone engine=rvm precision=fp32 downsample-ratio=0.01 model-dir=\"\(Self.defaultSets)\" ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-library-error-quark")
        #expect(error.code == Int32(GST_LIBRARY_ERROR_SETTINGS.rawValue))
        #expect(error.message.contains("downsample-ratio") && error.message.contains("0.03125"))
    }

    /// Without the RVM set engine=rvm says where it goes and how to install it.
    @Test func aMissingRVMSetIsResourceNotFound() throws {
        let empty = TestPaths.scratch("no-rvm")
        let run = runPipeline("videotestsrc num-buffers=2 ! video/x-raw,format=BGRA,width=64,height=48 "
                              + "! matanyone engine=rvm precision=fp32 model-dir=\"\(empty)\" ! fakesink")
        let error = try #require(run.error)
        #expect(error.domain == "gst-resource-error-quark")
        #expect(error.code == Int32(GST_RESOURCE_ERROR_NOT_FOUND.rawValue))
        #expect(error.message.contains(empty + "/rvm") && error.message.contains("scripts/setup.sh"))
    }
}

extension TestPaths {
    /// The decoded 512×288 dancer frames, one array each.
    static func frames512() throws -> [[UInt8]] {
        let path = dataDir + "/test-sample2-512x288.bgra"
        let data = try #require(FileManager.default.contents(atPath: path), "missing \(path): run scripts/test.sh")
        let size = 512 * 288 * 4
        return stride(from: 0, to: data.count - size + 1, by: size).map { Array(data[$0..<$0 + size]) }
    }
}

/// `g_object_set` of a caps property (the variadic C call is not callable from Swift).
func g_object_set_property_caps(_ element: UnsafeMutablePointer<GstElement>, _ name: String, _ caps: UnsafeMutablePointer<GstCaps>?) {
    var value = GValue()
    g_value_init(&value, gst_caps_get_type())
    gst_value_set_caps(&value, caps)
    g_object_set_property(UnsafeMutableRawPointer(element).assumingMemoryBound(to: GObject.self), name, &value)
    g_value_unset(&value)
}
