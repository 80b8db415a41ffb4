import CPixelISA
import Foundation
@_exported import MattePixelTypes
import PixelKernels
import PixelKernelsAVX2
import PixelKernelsAVX512

/// Which build of the pixel kernels runs: the same Swift source compiled for baseline x86-64 (what
/// the plugin itself is built for, so it loads anywhere), for x86-64-v3 (AVX2) and for x86-64-v4
/// (AVX-512). Every build gives the same bytes (no fused multiply-adds, no reassociation: the wider
/// ones only do more lanes at once; tests compare them on every size, tail and stride); the widest the
/// CPU has is chosen once per process.
public enum PixelISA: Int, CaseIterable, Comparable, Sendable, CustomStringConvertible {
    case baseline, avx2, avx512

    /// What this CPU runs. `MATANYONE_PIXEL_ISA=baseline|avx2|avx512` asks for a narrower one (to
    /// compare builds, or to rule one out); a wider one than the CPU has is not taken.
    public static let active: PixelISA = {
        let supported = PixelISA(rawValue: Int(matte_pixel_isa_level())) ?? .baseline
        guard let asked = ProcessInfo.processInfo.environment["MATANYONE_PIXEL_ISA"].flatMap(PixelISA.init(name:)) else {
            return supported
        }
        return min(asked, supported)
    }()

    /// Every build this CPU can run, narrowest first.
    public static var supported: [PixelISA] {
        allCases.filter { $0.rawValue <= Int(matte_pixel_isa_level()) }
    }

    public init?(name: String) {
        guard let isa = PixelISA.allCases.first(where: { $0.description == name }) else { return nil }
        self = isa
    }

    public var description: String {
        switch self {
        case .baseline: return "baseline"
        case .avx2: return "avx2"
        case .avx512: return "avx512"
        }
    }

    public static func < (a: PixelISA, b: PixelISA) -> Bool { a.rawValue < b.rawValue }

    var compositor: any Compositing.Type {
        switch self {
        case .baseline: return PixelKernels.CompositorKernel.self
        case .avx2: return PixelKernelsAVX2.CompositorKernel.self
        case .avx512: return PixelKernelsAVX512.CompositorKernel.self
        }
    }

    var resampler: any Resampling.Type {
        switch self {
        case .baseline: return PixelKernels.ResamplerKernel.self
        case .avx2: return PixelKernelsAVX2.ResamplerKernel.self
        case .avx512: return PixelKernelsAVX512.ResamplerKernel.self
        }
    }

    var opticalFlow: any FlowEstimating.Type {
        switch self {
        case .baseline: return PixelKernels.OpticalFlowKernel.self
        case .avx2: return PixelKernelsAVX2.OpticalFlowKernel.self
        case .avx512: return PixelKernelsAVX512.OpticalFlowKernel.self
        }
    }

    var planeConverter: any PlaneConverting.Type {
        switch self {
        case .baseline: return PixelKernels.PlaneConverterKernel.self
        case .avx2: return PixelKernelsAVX2.PlaneConverterKernel.self
        case .avx512: return PixelKernelsAVX512.PlaneConverterKernel.self
        }
    }

    var motionCarry: any MotionCarrying.Type {
        switch self {
        case .baseline: return PixelKernels.MotionCarryKernel.self
        case .avx2: return PixelKernelsAVX2.MotionCarryKernel.self
        case .avx512: return PixelKernelsAVX512.MotionCarryKernel.self
        }
    }
}
