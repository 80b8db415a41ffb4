import Foundation
import Testing
@testable import MatteEngine
import TestPaths
import MattePixels

/// The segmenter engine on the real converted model and the real ONNX Runtime.
struct SegmenterEngineTests {
    private var options: EngineOptions { EngineOptions(modelDir: TestPaths.modelDir) }

    /// A copy of the installed segmenter set that a test may damage.
    private func copyOfModelSet() throws -> String {
        let source = ModelLocations.engineDir(modelDir: TestPaths.modelDir, engine: "segmenter")
        let target = TestPaths.scratch("segmenter-copy")
        for name in try FileManager.default.contentsOfDirectory(atPath: source) {
            try FileManager.default.copyItem(atPath: source + "/" + name, toPath: target + "/" + name)
        }
        return target
    }

    private func editManifest(in directory: String, _ edit: (inout [String: Any]) -> Void) throws {
        let path = directory + "/manifest.json"
        var json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as! [String: Any]
        edit(&json)
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: path))
    }

    /// model-dir naming the MatAnyone2 set itself (seed=auto then needs the segmenter): the segmenter's
    /// set is found beside it; where there is none, the error says what model-dir should be instead
    /// of sending the user to set-up.
    @Test func aModelDirThatIsAnotherEnginesSetFindsTheSegmenterBesideIt() throws {
        let root = TestPaths.scratch("sets-side-by-side")
        try FileManager.default.createSymbolicLink(atPath: root + "/matanyone2",
                                                   withDestinationPath: TestPaths.modelDir + "/matanyone2")
        try FileManager.default.createSymbolicLink(atPath: root + "/segmenter",
                                                   withDestinationPath: ModelLocations.engineDir(modelDir: TestPaths.modelDir, engine: "segmenter"))
        #expect(ModelLocations.engineDir(modelDir: root + "/matanyone2", engine: "segmenter") == root + "/segmenter")
        _ = try SegmenterEngine(options: EngineOptions(modelDir: root + "/matanyone2"))

        let alone = TestPaths.scratch("set-alone")
        try FileManager.default.createSymbolicLink(atPath: alone + "/matanyone2", withDestinationPath: TestPaths.modelDir + "/matanyone2")
        #expect {
            try SegmenterEngine(options: EngineOptions(modelDir: alone + "/matanyone2"))
        } throws: { error in
            guard case let .modelMissing(path, hint) = error as? EngineError else { return false }
            return path == alone + "/matanyone2/segmenter" && hint.contains("is the matanyone2 set itself")
                && hint.contains("folder that holds the segmenter set") && !hint.contains("Run scripts/setup.sh")
        }
    }

    @Test func missingModelFolderNamesThePathAndTheFix() {
        let options = EngineOptions(modelDir: "/nonexistent/models")
        #expect {
            try SegmenterEngine(options: options)
        } throws: { error in
            guard case let .modelMissing(path, hint) = error as? EngineError else { return false }
            return path.hasPrefix("/nonexistent/models") && hint.contains("scripts/setup.sh")
        }
    }

    @Test func corruptModelFileIsInvalid() throws {
        let directory = try copyOfModelSet()
        try Data("this is not an onnx file".utf8).write(to: URL(fileURLWithPath: directory + "/selfie_segmentation.onnx"))
        #expect {
            try SegmenterEngine(options: EngineOptions(modelDir: directory))
        } throws: { error in
            guard case let .modelInvalid(path, _) = error as? EngineError else { return false }
            return path.hasSuffix("selfie_segmentation.onnx")
        }
    }

    @Test func manifestForAnotherEngineIsRejected() throws {
        let directory = try copyOfModelSet()
        try editManifest(in: directory) { $0["engine"] = "matanyone2" }
        // In its engine's subfolder (a model-dir that is itself another engine's set is not looked into).
        let root = TestPaths.scratch("other-engine")
        try FileManager.default.moveItem(atPath: directory, toPath: root + "/segmenter")
        #expect {
            try SegmenterEngine(options: EngineOptions(modelDir: root))
        } throws: { error in
            guard case let .modelInvalid(path, detail) = error as? EngineError else { return false }
            return path.hasSuffix("manifest.json") && detail.contains("engine 'matanyone2'")
        }
    }

    @Test func manifestListingAnAbsentFileIsMissing() throws {
        let directory = try copyOfModelSet()
        try FileManager.default.removeItem(atPath: directory + "/selfie_segmentation.onnx")
        #expect {
            try SegmenterEngine(options: EngineOptions(modelDir: directory))
        } throws: { error in
            guard case let .modelMissing(path, _) = error as? EngineError else { return false }
            return path.hasSuffix("selfie_segmentation.onnx")
        }
    }

    @Test func manifestDisagreeingWithTheFileIsInvalid() throws {
        let directory = try copyOfModelSet()
        try editManifest(in: directory) { json in
            var models = json["models"] as! [String: Any]
            var segmenter = models["segmenter"] as! [String: Any]
            segmenter["inputs"] = [["name": "image", "shape": [1, 128, 128, 3], "dtype": "float32"]]
            models["segmenter"] = segmenter
            json["models"] = models
        }
        #expect {
            try SegmenterEngine(options: EngineOptions(modelDir: directory))
        } throws: { error in
            guard case let .modelInvalid(_, detail) = error as? EngineError else { return false }
            return detail.contains("manifest")
        }
    }

    @Test func absentRuntimeLibraryIsReported() {
        var options = self.options
        options.runtimeLibrary = "/nonexistent/libonnxruntime.so.1"
        #expect {
            try SegmenterEngine(options: options)
        } throws: { error in
            guard case let .runtimeUnavailable(detail) = error as? EngineError else { return false }
            return detail.contains("/nonexistent/libonnxruntime.so.1") && detail.contains("runtime-library")
        }
    }

    @Test func aLibraryThatIsNotOnnxRuntimeIsReported() {
        var options = self.options
        options.runtimeLibrary = "libz.so.1"
        #expect {
            try SegmenterEngine(options: options)
        } throws: { error in
            guard case let .runtimeUnavailable(detail) = error as? EngineError else { return false }
            return detail.contains("not ONNX Runtime")
        }
    }

    @Test func findsThePersonInARealFrame() throws {
        let engine = try SegmenterEngine(options: options)
        let frames = try TestPaths.frames("test-sample2-512x288.bgra", width: 512, height: 288)
        let maskData = try #require(FileManager.default.contents(atPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray"))
        let mask = [UInt8](maskData)
        var alpha = [UInt8](repeating: 0, count: 512 * 288)
        var report = FrameReport(modelCount: 1)
        try frames[0].withUnsafeBufferPointer { pixels in
            try alpha.withUnsafeMutableBufferPointer { plane in
                try engine.matte(BGRAImage(base: pixels.baseAddress!, width: 512, height: 288, stride: 2048),
                                 into: GrayImage(base: plane.baseAddress!, width: 512, height: 288, stride: 512),
                                 report: &report)
            }
        }
        var intersection = 0, union = 0
        for index in 0..<alpha.count {
            let predicted = alpha[index] >= 128, truth = mask[index] >= 128
            if predicted && truth { intersection += 1 }
            if predicted || truth { union += 1 }
        }
        let iou = Double(intersection) / Double(max(union, 1))
        // The handstand pose is hard for a selfie segmenter (≈ 0.6); a broken pipeline gives ≈ 0.
        #expect(iou > 0.45, "IoU \(iou)")
        #expect(report.modelMs[0] > 0)
    }

    /// execution-provider=openvino without runtime-library loads the OpenVINO build set-up installs
    /// and runs fp32 there (the hint said explicitly): the alpha matches the CPU provider's within
    /// rounding. A runtime named that lacks OpenVINO is a settings error pointing at that build.
    @Test func openVinoRunsTheSegmenterFromItsOwnBuildInFp32() throws {
        try #require(FileManager.default.fileExists(atPath: OnnxRuntime.openvinoLibraryPath), "scripts/setup.sh installs it on x86-64")
        let frame = try TestPaths.frames("test-sample2-512x288.bgra", width: 512, height: 288)[0]
        func alpha(_ engine: SegmenterEngine) throws -> [UInt8] {
            var alpha = [UInt8](repeating: 0, count: 512 * 288)
            var report = FrameReport(modelCount: 1)
            try frame.withUnsafeBufferPointer { pixels in
                try alpha.withUnsafeMutableBufferPointer { plane in
                    try engine.matte(BGRAImage(base: pixels.baseAddress!, width: 512, height: 288, stride: 2048),
                                     into: GrayImage(base: plane.baseAddress!, width: 512, height: 288, stride: 512), report: &report)
                }
            }
            return alpha
        }
        var openvino = options
        openvino.session.provider = .openvino
        let engine = try SegmenterEngine(options: openvino)
        #expect(engine.provider == .openvino)
        let viaOpenVino = try alpha(engine), viaCpu = try alpha(try SegmenterEngine(options: options))
        let worst = zip(viaOpenVino, viaCpu).map { abs(Int($0) - Int($1)) }.max() ?? 0
        #expect(worst <= 2, "OpenVINO fp32 differs from the CPU provider by \(worst)/255")
        #expect(viaCpu.contains { $0 > 200 }, "no person found: the comparison would prove nothing")

        openvino.runtimeLibrary = OnnxRuntime.defaultLibraryPath
        #expect {
            try SegmenterEngine(options: openvino)
        } throws: { error in
            guard case let .badSettings(detail) = error as? EngineError else { return false }
            return detail.contains("execution-provider=openvino") && detail.contains(OnnxRuntime.openvinoLibraryPath)
        }
    }

    @Test func oddAndTinySizesWork() throws {
        let engine = try SegmenterEngine(options: options)
        for (width, height) in [(17, 9), (1, 1), (333, 17)] {
            let pixels = [UInt8](repeating: 128, count: width * height * 4 + 64)
            var alpha = [UInt8](repeating: 7, count: width * height)
            var report = FrameReport(modelCount: 1)
            try pixels.withUnsafeBufferPointer { source in
                try alpha.withUnsafeMutableBufferPointer { plane in
                    try engine.matte(BGRAImage(base: source.baseAddress!, width: width, height: height, stride: width * 4),
                                     into: GrayImage(base: plane.baseAddress!, width: width, height: height, stride: width),
                                     report: &report)
                }
            }
            // A flat grey image holds no person.
            let mean = Double(alpha.reduce(0) { $0 + Int($1) }) / Double(alpha.count)
            #expect(mean < 64, "\(width)×\(height): mean alpha \(mean)")
        }
    }
}
