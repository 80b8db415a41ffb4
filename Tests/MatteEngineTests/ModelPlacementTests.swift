import Foundation
import Testing
@testable import MatteEngine
import TestPaths

/// `model-placement`: what it accepts and refuses (pure parsing, then the settings it cannot run with,
/// said before any model loads), and real runs: placing the bf16 set's own models in bf16 on the fp32
/// set is the bf16 set, byte for byte; a model on OpenVINO in fp32 stays near fp32.
@Suite(.serialized) struct ModelPlacementTests {
    static let width = 512, height = 288

    private func settingsError(_ body: () throws -> Any) -> String? {
        do {
            _ = try body()
            return nil
        } catch let EngineError.badSettings(detail) {
            return detail
        } catch {
            return "not a settings error: \(error)"
        }
    }

    @Test func parsesPairsInAnyCaseAndSpacing() throws {
        #expect(try ModelPlacement.parse("").isEmpty)
        #expect(try ModelPlacement.parse("  ").isEmpty)
        let placement = try ModelPlacement.parse(" memframe = CPU,Encoder=bf16 ,decoder=FP32\n")
        #expect(placement == ["memframe": .cpu, "encoder": .bf16, "decoder": .fp32])
        // Described in the set's order, as parse reads it back.
        #expect(ModelPlacement.describe(placement) == "encoder=bf16,decoder=fp32,memframe=cpu")
        #expect(try ModelPlacement.parse(ModelPlacement.describe(placement)) == placement)
        // The same placement twice is harmless.
        #expect(try ModelPlacement.parse("uncert=openvino,uncert=openvino") == ["uncert": .openvino])
    }

    @Test func refusesWhatItCannotReadNamingWhatItTakes() {
        let unknownModel = settingsError { try ModelPlacement.parse("encoder=bf16,decodr=fp32") } ?? ""
        #expect(unknownModel.contains("'decodr'") && unknownModel.contains("encoder, uncert, readout, decoder, maskencoder, memframe"),
                "\(unknownModel)")
        let unknownPlace = settingsError { try ModelPlacement.parse("encoder=gpu") } ?? ""
        #expect(unknownPlace.contains("'gpu'") && unknownPlace.contains("fp32, bf16, cpu, openvino, cuda, tensorrt"), "\(unknownPlace)")
        for malformed in ["encoder", "=bf16", "encoder=", "encoder=bf16,", ",encoder=bf16", "encoder=bf16;decoder=fp32"] {
            let detail = settingsError { try ModelPlacement.parse(malformed) }
            #expect(detail != nil && !(detail!.hasPrefix("not a settings")), "\(malformed): \(String(describing: detail))")
        }
        let twice = settingsError { try ModelPlacement.parse("encoder=bf16,encoder=cpu") } ?? ""
        #expect(twice.contains("encoder twice"), "\(twice)")
    }

    private func engine(_ precision: ModelPrecision, _ placement: String, cpu: CpuFeatures = .current,
                        provider: ExecutionProvider = .cpu, server: ServerOptions? = nil,
                        mask: [UInt8] = [255], maskSize: (Int, Int) = (1, 1)) throws -> MatAnyone2Engine {
        var options = EngineOptions(modelDir: TestPaths.modelDir, precision: precision)
        options.placement = try ModelPlacement.parse(placement)
        options.cpuFeatures = cpu
        options.session.provider = provider
        options.server = server
        return try MatAnyone2Engine(options: options, seed: .mask(pixels: mask, width: maskSize.0, height: maskSize.1))
    }

    /// Each is a settings error naming what to change, before any model loads.
    @Test func placementsTheRunCannotGiveAreSettingsErrors() {
        let int8 = settingsError { try engine(.int8, "encoder=bf16") } ?? ""
        #expect(int8.contains("precision=int8") && int8.contains("encoder=bf16") && int8.contains("precision=fp32, bf16 or auto"),
                "\(int8)")
        let noBf16 = settingsError { try engine(.fp32, "decoder=bf16", cpu: Bf16Tests.avx2Only) } ?? ""
        #expect(noBf16.contains("model-placement decoder=bf16") && noBf16.contains("place decoder on cpu or openvino"), "\(noBf16)")
        let mixed = settingsError { try engine(.fp32, "encoder=cuda,decoder=openvino") } ?? ""
        #expect(mixed.contains("mixes a GPU (encoder) with OpenVINO"), "\(mixed)")
        let bf16OnGpu = settingsError { try engine(.bf16, "encoder=cuda", cpu: Bf16Tests.zen4) } ?? ""
        #expect(bf16OnGpu.contains("precision=bf16 runs through OpenVINO"), "\(bf16OnGpu)")
        let gpuBesideOpenVino = settingsError { try engine(.fp32, "encoder=cuda", provider: .openvino) } ?? ""
        #expect(gpuBesideOpenVino.contains("mixes a GPU (encoder) with OpenVINO (execution-provider=openvino)"), "\(gpuBesideOpenVino)")
        let openVinoWithCuda = settingsError { try engine(.fp32, "uncert=openvino", provider: .cuda) } ?? ""
        #expect(openVinoWithCuda.contains("execution-provider=cuda") && openVinoWithCuda.contains("place uncert on cpu or cuda"),
                "\(openVinoWithCuda)")
        let server = settingsError { try engine(.fp32, "encoder=cpu", server: ServerOptions(url: "http://127.0.0.1:9")) } ?? ""
        #expect(server.contains("inference-server"), "\(server)")
        var segmenterOptions = EngineOptions(modelDir: TestPaths.modelDir)
        segmenterOptions.placement = ["encoder": .cpu]
        let segmenter = settingsError {
            try makeEngine(.segmenter, options: segmenterOptions, parameters: MatAnyone2Parameters(), workingShortSide: 288,
                           seed: { .automatic })
        } ?? ""
        #expect(segmenter.contains("the engine is the segmenter"), "\(segmenter)")
    }

    /// precision=auto keeps fp32 when a model is placed on a GPU (bf16 runs on OpenVINO's build, which has
    /// none), rather than choosing bf16 and failing.
    @Test func autoPrecisionKeepsFp32BesideAGpuPlacement() throws {
        var options = EngineOptions(modelDir: TestPaths.modelDir)
        options.cpuFeatures = Bf16Tests.zen4
        options.placement = ["encoder": .cuda]
        let choice = AutoPrecision.choose(options, environment: [:])
        #expect(choice.precision == .fp32 && choice.reason.contains("model-placement puts encoder on a GPU"), "\(choice.reason)")
    }

    /// A model placed on a GPU where the runtime has none: the placement is named, with what installs it
    /// (where the GPU build is installed, it is the GPU's own readiness check that answers).
    @Test func aGpuPlacementWithoutTheGpuBuildSaysSo() throws {
        let detail: String
        do {
            _ = try engine(.fp32, "decoder=cuda")
            detail = "it started"
        } catch {
            detail = "\(error)"
        }
        if !FileManager.default.fileExists(atPath: OnnxRuntime.gpuLibraryPath) {
            #expect(detail.contains("model-placement decoder=cuda needs ONNX Runtime's GPU build") && detail.contains("--gpu"), "\(detail)")
        } else {
            #expect(detail == "it started" || detail.lowercased().contains("cuda"), "\(detail)")
        }
    }

    /// execution-provider=auto with a model on OpenVINO: the rest runs on the CPU (that build has no GPU),
    /// and a warning says so.
    @Test func autoProviderBesideAnOpenVinoPlacementRunsTheRestOnTheCpuAndSaysSo() throws {
        try #require(FileManager.default.fileExists(atPath: OnnxRuntime.openvinoLibraryPath),
                     "scripts/setup.sh installs the OpenVINO build on x86-64")
        let placed = try engine(.fp32, "uncert=openvino", provider: .auto)
        #expect(placed.placement == "encoder=cpu,uncert=openvino,readout=cpu,decoder=cpu,maskencoder=cpu,memframe=cpu",
                "\(placed.placement)")
        #expect(placed.providerNote?.contains("execution-provider=auto runs MatAnyone2 on the CPU") == true,
                "\(String(describing: placed.providerNote))")
    }

    private func alphas(_ engine: MatAnyone2Engine, frames: Int) throws -> [[Float]] {
        let all = try TestPaths.frames("test-sample2-512x288.bgra", width: Self.width, height: Self.height)
        return try workingAlphas(engine, Array(all.prefix(frames)), width: Self.width, height: Self.height)
    }

    private func seedMask() throws -> [UInt8] {
        try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray")))
    }

    /// Where this CPU computes bf16: the bf16 set's bf16 models placed in bf16 on the fp32 set are the
    /// bf16 set (the same files, run the same way), every alpha identical; elsewhere the placement is
    /// refused as precision=bf16 is.
    @Test func theBf16SetsModelsPlacedInBf16AreTheBf16Set() throws {
        let mask = try seedMask()
        let bf16Set = try ModelManifest.load(directory: ModelLocations.matAnyone2Dir(modelDir: TestPaths.modelDir, precision: .bf16))
        let placed = bf16Set.bf16Models.map { "\($0)=bf16" }.joined(separator: ",")
        guard !CpuFeatures.current.bf16.isEmpty else {
            let refused = settingsError { try engine(.fp32, placed, mask: mask, maskSize: (Self.width, Self.height)) } ?? ""
            #expect(refused.contains("bf16 needs a CPU that computes it"), "\(refused)")
            return
        }
        try #require(ModelLocations.hasMatAnyone2Set(modelDir: TestPaths.modelDir, precision: .bf16),
                     "scripts/test.sh makes the bf16 set where the CPU computes bf16")
        let byPlacement = try engine(.fp32, placed, mask: mask, maskSize: (Self.width, Self.height))
        let expected = MatAnyone2Core.modelNames.map { "\($0)=" + (bf16Set.bf16Models.contains($0) ? "bf16" : "cpu") }
        #expect(byPlacement.placement == expected.joined(separator: ","))
        #expect(byPlacement.precision == .fp32, "the set is still the fp32 one")
        let bySet = try engine(.bf16, "", mask: mask, maskSize: (Self.width, Self.height))
        #expect(bySet.placement == byPlacement.placement)
        let (a, b) = (try alphas(byPlacement, frames: 6), try alphas(bySet, frames: 6))
        #expect(a == b, "same models, same arithmetic: the same alphas")
    }

    /// A model on OpenVINO in fp32 (the encoder, the largest), or the bf16 set's models put back to fp32:
    /// they run where placed and stay near the fp32 set on the CPU provider (different kernels, same
    /// arithmetic: differences at float rounding, not bf16's).
    @Test func fp32PlacementsStayNearFp32() throws {
        try #require(FileManager.default.fileExists(atPath: OnnxRuntime.openvinoLibraryPath),
                     "scripts/setup.sh installs the OpenVINO build on x86-64")
        let mask = try seedMask()
        let reference = try alphas(try engine(.fp32, "", mask: mask, maskSize: (Self.width, Self.height)), frames: 6)
        var cases = ["encoder=openvino"]
        if !CpuFeatures.current.bf16.isEmpty { cases.append("readout=fp32,decoder=fp32,maskencoder=fp32") }
        for placement in cases {
            let precision: ModelPrecision = placement.hasPrefix("encoder") ? .fp32 : .bf16
            let placed = try engine(precision, placement, mask: mask, maskSize: (Self.width, Self.height))
            if precision == .fp32 {
                #expect(placed.providers["encoder"] == .openvino && placed.providers["decoder"] == .cpu)
                #expect(placed.placement.hasPrefix("encoder=openvino,uncert=cpu"), "\(placed.placement)")
            } else {
                #expect(!placed.placement.contains("bf16") && placed.providers.values.allSatisfy { $0 == .cpu },
                        "\(placed.placement)")
            }
            let alphas = try alphas(placed, frames: 6)
            let differences = zip(reference.joined(), alphas.joined()).map { abs($0 - $1) }
            let maximum = differences.max() ?? 0, mean = differences.reduce(0, +) / Float(differences.count)
            print("model-placement \(placement) (\(precision.rawValue) set) vs fp32 over 6 frames: mean |Δ| \(mean), max \(maximum)")
            // (Measured on a Zen 4: OpenVINO's encoder mean 8e-6, max 6e-4; the CPU provider of the
            // OpenVINO build 1e-7, 2e-6. bf16 itself is 2e-3 mean, 0.02 max.)
            #expect(mean <= 1e-4 && maximum <= 0.01, "\(placement): mean \(mean), max \(maximum)")
        }
    }
}
