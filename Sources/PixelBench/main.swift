import Foundation
import MattePixels

// What each build of the element's own per-frame pixel work costs on this CPU (PixelISA): the
// frame's downscale to the model, the alpha's upscale, the composites with estimated edge colours,
// and the motion of async mode. Every build the CPU runs is timed in the same run, round by round
// (one repetition of each build in turn), so their ratios share the machine's state. Driven by
// tools/bench_pixels.py, which decodes the clip; this reads raw planes:
//
//   PixelBench --width W --height H --frames F.bgra --mask M.gray --mask-width MW --mask-height MH [--reps 30]
//              [--steps upscale,motion]   (only these steps: for a profile of one)
//              [--matte edge|soft]        (edge: the mask as it is, soft only along the person's edge;
//                                          soft: soft everywhere, as an uncertain model's, the worst case
//                                          for the edge colours: every tile is estimated)
//
// and prints one JSON object on stdout: per build and step, the median and p95 in ms, and whether
// every build gave the baseline's bytes.

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("PixelBench: \(message)\n".utf8))
    exit(2)
}

var width = 0, height = 0, maskWidth = 512, maskHeight = 288, reps = 30
var framesPath = "", maskPath = ""
var only: Set<String>?
var soft = false
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    guard let value = arguments.next() else { fail("\(argument) needs a value") }
    switch argument {
    case "--width": width = Int(value) ?? 0
    case "--height": height = Int(value) ?? 0
    case "--frames": framesPath = value
    case "--mask": maskPath = value
    case "--mask-width": maskWidth = Int(value) ?? 0
    case "--mask-height": maskHeight = Int(value) ?? 0
    case "--reps": reps = Int(value) ?? 0
    case "--steps": only = Set(value.split(separator: ",").map(String.init))
    case "--matte":
        guard value == "edge" || value == "soft" else { fail("--matte takes edge or soft") }
        soft = value == "soft"
    default: fail("unknown option \(argument)")
    }
}
guard width > 0, height > 0, maskWidth > 0, maskHeight > 0, reps > 0 else { fail("sizes and --reps must be positive") }
guard let frameData = FileManager.default.contents(atPath: framesPath) else { fail("cannot read \(framesPath)") }
guard let maskData = FileManager.default.contents(atPath: maskPath), maskData.count >= maskWidth * maskHeight else {
    fail("cannot read a \(maskWidth)×\(maskHeight) plane from \(maskPath)")
}
let frameBytes = width * height * 4
let frames = stride(from: 0, to: frameData.count - frameBytes + 1, by: frameBytes).map { [UInt8](frameData[$0..<($0 + frameBytes)]) }
guard frames.count >= 2 else { fail("\(framesPath) holds fewer than two \(width)×\(height) BGRA frames") }

func milliseconds(_ body: () -> Void) -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1_000_000
}

func percentile(_ values: [Double], _ q: Double) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q + 0.5))]
}

/// One build's kernels and buffers, as the element holds them for a stream.
final class Chain {
    let isa: PixelISA
    let down: Resampler, up: Resampler
    var compositor: Compositor
    let carry: MotionCarry
    var modelInput = [Float](repeating: 0, count: 3 * maskWidth * maskHeight)
    var alpha = [UInt8](repeating: 0, count: width * height)
    var output = [UInt8](repeating: 0, count: width * height * 4)
    var pts: UInt64 = 0
    var times: [String: [Double]] = [:]
    /// A digest of every output, to compare builds.
    var digest: UInt64 = 14_695_981_039_346_656_037

    init(isa: PixelISA) {
        self.isa = isa
        down = Resampler(sourceWidth: width, sourceHeight: height, targetWidth: maskWidth, targetHeight: maskHeight, isa: isa)
        up = Resampler(sourceWidth: maskWidth, sourceHeight: maskHeight, targetWidth: width, targetHeight: height, isa: isa)
        compositor = Compositor(isa: isa)
        carry = MotionCarry(frameWidth: width, frameHeight: height, isa: isa)
    }

    func absorb<T>(_ values: [T]) {
        values.withUnsafeBytes { bytes in
            let words = bytes.count / 8
            for index in 0..<words { digest = (digest ^ bytes.loadUnaligned(fromByteOffset: 8 * index, as: UInt64.self)) &* 1_099_511_628_211 }
            for byte in bytes[(8 * words)...] { digest = (digest ^ UInt64(byte)) &* 1_099_511_628_211 }
        }
    }

    func time(_ step: String, _ body: () -> Void) { times[step, default: []].append(milliseconds(body)) }

    /// One frame's work: the steps the element runs for a composite in async mode with motion.
    func run(frame index: Int, maskFloats: [Float], record: Bool) {
        frames[index].withUnsafeBufferPointer { pixels in
            let image = BGRAImage(base: pixels.baseAddress!, width: width, height: height, stride: width * 4)
            let steps: [(String, () -> Void)] = [
                ("downscale", { self.down.bgraToRGB(image, into: &self.modelInput, pixelStep: 1, rowStride: maskWidth,
                                                    planeStride: maskWidth * maskHeight) }),
                ("upscale", {
                    maskFloats.withUnsafeBufferPointer { plane in
                        self.alpha.withUnsafeMutableBufferPointer {
                            self.up.resample(plane.baseAddress!, sourceStride: maskWidth,
                                             into: GrayImage(base: $0.baseAddress!, width: width, height: height, stride: width))
                        }
                    }
                }),
                ("composite-none-estimated", { self.composite(image, background: .none, estimated: true) }),
                ("composite-color-estimated", { self.composite(image, background: .color, estimated: true) }),
                ("composite-none", { self.composite(image, background: .none, estimated: false) }),
                ("motion", {
                    self.pts += 1
                    self.carry.add(image, pts: self.pts)
                }),
            ]
            for (name, body) in steps {
                // (The composites need this frame's alpha: the upscale runs, untimed, when not asked for.)
                let timed = record && only?.contains(name) ?? true
                guard timed || name == "upscale" || !record else { continue }
                if timed { time(name, body) } else { body() }
                if timed && name != "motion" {
                    absorb(name == "downscale" ? modelInput.withUnsafeBytes { Array($0) } : name == "upscale" ? alpha : output)
                }
            }
        }
    }

    func composite(_ image: BGRAImage, background: BackgroundMode, estimated: Bool) {
        alpha.withUnsafeBufferPointer { matte in
            compositor.composite(frame: image, alpha: GrayView(base: matte.baseAddress!, width: width, height: height, stride: width),
                                 output: &output, outputStride: width * 4, format: .bgra, background: background,
                                 color: 0xFF00_B140, foregroundEstimation: estimated)
        }
    }
}

// The soft matte: the mask squeezed into 0.2…0.8 with a ripple (a fixed pattern: the same each run).
let maskFloats = maskData.prefix(maskWidth * maskHeight).enumerated().map { index, byte in
    soft ? 0.2 + 0.6 * Float(byte) / 255 + 0.05 * Float((index * 7919) % 13) / 13 : Float(byte) / 255
}
let chains = PixelISA.supported.map(Chain.init)
for chain in chains {
    for index in 0..<2 { chain.run(frame: index, maskFloats: maskFloats, record: false) }  // (buffers, pages, caches)
}
for round in 0..<reps {
    for chain in chains { chain.run(frame: round % frames.count, maskFloats: maskFloats, record: true) }
}

let steps = ["downscale", "upscale", "composite-none-estimated", "composite-color-estimated", "composite-none", "motion"]
var builds: [String: Any] = [:]
for chain in chains {
    var entry: [String: Any] = [:]
    for step in steps {
        guard let values = chain.times[step] else { continue }
        entry[step] = ["median_ms": percentile(values, 0.5), "p95_ms": percentile(values, 0.95)]
        if let base = chains.first?.times[step], chain.isa != .baseline {
            entry[step + "_speedup"] = percentile(base, 0.5) / max(percentile(values, 0.5), 1e-9)
        }
    }
    builds[chain.isa.description] = entry
}
let result: [String: Any] = [
    "width": width, "height": height, "model_width": maskWidth, "model_height": maskHeight,
    "matte": soft ? "soft" : "edge",
    "frames": frames.count, "reps": reps, "cores": ProcessInfo.processInfo.activeProcessorCount,
    "active": PixelISA.active.description, "supported": PixelISA.supported.map(\.description),
    "builds": builds,
    "same_bytes": Set(chains.map(\.digest)).count == 1,
]
let data = try JSONSerialization.data(withJSONObject: result, options: [.sortedKeys, .prettyPrinted])
print(String(decoding: data, as: UTF8.self))
