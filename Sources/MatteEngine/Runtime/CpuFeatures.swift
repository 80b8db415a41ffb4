import CPixelISA
import Foundation

/// What the CPU computes, from `/proc/cpuinfo` (and, for AMX, the kernel): the facts `precision=bf16`
/// is decided on. A value, so tests can hand an engine the CPU of another machine (one without bf16,
/// say).
public struct CpuFeatures: Equatable, Sendable {
    public let flags: Set<String>
    public let vendor: String
    public let modelName: String
    /// Whether the kernel can give a process AMX's tile state (Linux 5.16 on): an older one lists the
    /// amx flags but cannot run AMX.
    public let kernelEnablesAMX: Bool

    /// Parses `/proc/cpuinfo` text (the first processor's lines: every core of a machine has the same).
    /// `kernelEnablesAMX` nil: as the flags say (a simulated CPU).
    public init(cpuinfo: String, kernelEnablesAMX: Bool? = nil) {
        var flags: Set<String> = []
        var vendor = "", modelName = ""
        for line in cpuinfo.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let key = parts[0].trimmingCharacters(in: .whitespaces)
            let value = parts[1].trimmingCharacters(in: .whitespaces)
            if key == "flags", flags.isEmpty { flags = Set(value.split(separator: " ").map(String.init)) }
            if key == "vendor_id", vendor.isEmpty { vendor = value }
            if key == "model name", modelName.isEmpty { modelName = value }
        }
        self.flags = flags
        self.vendor = vendor
        self.modelName = modelName
        self.kernelEnablesAMX = kernelEnablesAMX ?? flags.contains("amx_tile")
    }

    /// This machine's (read once).
    public static let current = CpuFeatures(cpuinfo: (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? "",
                                            kernelEnablesAMX: matte_kernel_enables_amx() != 0)

    /// AMX's bf16 tiles, usable: the CPU has them and the kernel enables their state.
    public var amxBf16: Bool { flags.contains("amx_bf16") && kernelEnablesAMX }

    /// The bf16 arithmetic the CPU has: AMX tiles, AVX-512 dot products, both or neither.
    public var bf16: [String] { ["amx_bf16", "avx512_bf16"].filter(flags.contains) }

    /// Measured on a 2-core Intel Xeon (Emerald Rapids, AMX not exposed by the hypervisor): OpenVINO's
    /// bf16 kernels on AVX512_BF16 alone ran MatAnyone2 1.17-1.29x slower than fp32 a frame (each model
    /// 1.0-1.6x, bench/bf16-2core-avx512bf16-intel-noamx.json). Intel's AVX-512 cores
    /// retire one bf16 dot product (32 MACs) per cycle but two fp32 FMAs (16 MACs each), so bf16 gains
    /// nothing there and loses the conversions; AMX (2.56x faster than fp32 on a 2-core Xeon with it,
    /// bench/bf16-2core-avx512bf16-intel-amx.json) and AMD's Zen 4/5 are where it pays.
    public var bf16SlowerThanFp32: Bool { !amxBf16 && vendor == "GenuineIntel" }

    /// Why `precision=bf16` cannot run here (nil when it can): the CPU must compute bf16 itself, since
    /// emulated bf16 is slower than fp32 and as inexact as bf16.
    public var bf16Problem: String? {
        guard bf16.isEmpty else { return nil }
        let name = modelName.isEmpty ? "this CPU" : "this CPU (\(modelName))"
        return "precision=bf16 needs a CPU that computes bf16 (AVX512_BF16: AMD Zen 4 and later, Intel Cooper Lake; "
            + "or AMX-BF16: Intel Sapphire Rapids and later), and \(name) has neither, so bf16 would only be emulated, "
            + "slower than fp32; use precision=fp32 (or precision=int8 for speed on this CPU)"
    }
}
