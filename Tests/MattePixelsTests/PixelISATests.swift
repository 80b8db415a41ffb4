import Testing
import MattePixels

/// Every build of the pixel kernels this CPU runs gives the baseline build's bytes: on frame sizes
/// with every tail of the vector lanes, padded strides, frames big enough to be sliced over the
/// cores, and each composite, resampling and conversion the element uses. A build the CPU lacks is
/// not run, and its test says so (skipped with the reason).
struct PixelISATests {
    /// (width, height, padding bytes per row): tails of 4, 8, 16 and 64 lanes, single rows and
    /// columns, a frame past the slicing threshold (500 000 pixels).
    static let sizes: [(Int, Int, Int)] = [(1, 1, 0), (1, 9, 4), (3, 2, 0), (15, 7, 12), (16, 16, 0), (17, 5, 4),
                                            (33, 21, 0), (63, 40, 20), (64, 64, 0), (65, 33, 4), (131, 77, 28),
                                            (257, 143, 0), (1001, 541, 36)]

    /// Deterministic noise (a fixed LCG) so failures reproduce.
    struct Noise {
        var state: UInt64
        mutating func next() -> UInt8 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
    }

    /// A frame of smooth colour with noise, and a matte like a person's: 255 inside an ellipse, 0
    /// outside, a soft ramp of a few pixels between (where the edge colours are estimated), and a few
    /// scattered soft bytes.
    static func scene(width: Int, height: Int, padding: Int, seed: UInt64) -> (frame: [UInt8], stride: Int, alpha: [UInt8], alphaStride: Int) {
        var noise = Noise(state: seed)
        let stride = width * 4 + padding, alphaStride = width + padding
        var frame = [UInt8](repeating: 0, count: stride * height)
        var alpha = [UInt8](repeating: 0, count: alphaStride * height)
        let cx = Double(width) / 2, cy = Double(height) / 2
        let rx = max(Double(width) * 0.35, 1), ry = max(Double(height) * 0.4, 1)
        for y in 0..<height {
            for x in 0..<width {
                let p = y * stride + x * 4
                frame[p] = UInt8(truncatingIfNeeded: x * 3 + Int(noise.next() >> 4))
                frame[p + 1] = UInt8(truncatingIfNeeded: y * 5 + Int(noise.next() >> 4))
                frame[p + 2] = UInt8(truncatingIfNeeded: (x + y) * 2 + Int(noise.next() >> 3))
                frame[p + 3] = noise.next() | 0x80
                let d = ((Double(x) - cx) / rx) * ((Double(x) - cx) / rx) + ((Double(y) - cy) / ry) * ((Double(y) - cy) / ry)
                let ramp = (1.15 - d) / 0.3  // 1 inside, 0 outside, soft for a band of a few pixels
                var a = UInt8(max(0, min(255, (ramp * 255).rounded())))
                if noise.next() < 6 { a = noise.next() }
                alpha[y * alphaStride + x] = a
            }
            // Padding holds garbage: no build may read it into a result.
            for p in (y * stride + width * 4)..<((y + 1) * stride) { frame[p] = noise.next() }
        }
        return (frame, stride, alpha, alphaStride)
    }

    /// Every composite the element makes, as bytes (the output's padding included: it must stay as it was).
    static func composites(isa: PixelISA, width: Int, height: Int, padding: Int) -> [[UInt8]] {
        let scene = scene(width: width, height: height, padding: padding, seed: UInt64(width * 7919 + height))
        var results: [[UInt8]] = []
        var compositor = Compositor(isa: isa)
        let outputStride = width * 4 + padding
        for background in BackgroundMode.allCases {
            for format in [CompositeFormat.bgra, .rgba] {
                for (estimate, premultiplied, color) in [(false, false, UInt32(0xFF20_40C0)), (true, false, 0xFF20_40C0),
                                                         (true, true, 0x8010_E030), (false, true, 0x0000_0000)] {
                    var output = [UInt8](repeating: 0xA5, count: outputStride * height)
                    scene.frame.withUnsafeBufferPointer { frame in
                        scene.alpha.withUnsafeBufferPointer { alpha in
                            compositor.composite(frame: BGRAImage(base: frame.baseAddress!, width: width, height: height, stride: scene.stride),
                                                 alpha: GrayView(base: alpha.baseAddress!, width: width, height: height, stride: scene.alphaStride),
                                                 output: &output, outputStride: outputStride, format: format,
                                                 background: background, color: color, foregroundEstimation: estimate,
                                                 premultiplied: premultiplied)
                        }
                    }
                    results.append(output)
                }
            }
        }
        return results
    }

    /// The model's input from a frame, its alpha back to the frame's size (floats and bytes), and a
    /// mask to floats: to a smaller and to a larger size.
    static func resamplings(isa: PixelISA, width: Int, height: Int, padding: Int) -> [[UInt8]] {
        let scene = scene(width: width, height: height, padding: padding, seed: UInt64(width * 104_729 + height))
        var results: [[UInt8]] = []
        func bytes(_ floats: [Float]) -> [UInt8] { floats.withUnsafeBytes { Array($0) } }
        for (tw, th) in [(max(width / 3, 1), max(height / 2, 1)), (width * 2 + 1, height + 3)] {
            let down = Resampler(sourceWidth: width, sourceHeight: height, targetWidth: tw, targetHeight: th, isa: isa)
            var nchw = [Float](repeating: -1, count: 3 * tw * th), nhwc = [Float](repeating: -1, count: 3 * tw * th)
            scene.frame.withUnsafeBufferPointer { frame in
                let image = BGRAImage(base: frame.baseAddress!, width: width, height: height, stride: scene.stride)
                down.bgraToRGB(image, into: &nchw, pixelStep: 1, rowStride: tw, planeStride: tw * th)
                down.bgraToRGB(image, into: &nhwc, pixelStep: 3, rowStride: 3 * tw, planeStride: 1, scale: 1)
            }
            results += [bytes(nchw), bytes(nhwc)]
            // A float alpha at the target size back up to the frame's, as floats and as bytes.
            let plane = (0..<(tw * th)).map { Float(scene.alpha[($0 % tw) % width + (($0 / tw) % height) * scene.alphaStride]) / 255 * 1.1 - 0.05 }
            let up = Resampler(sourceWidth: tw, sourceHeight: th, targetWidth: width, targetHeight: height, isa: isa)
            var floats = [Float](repeating: -1, count: width * height)
            var gray = [UInt8](repeating: 0x5A, count: (width + padding) * height)
            plane.withUnsafeBufferPointer { source in
                up.resample(source.baseAddress!, sourceStride: tw, into: &floats, destinationStride: width)
                gray.withUnsafeMutableBufferPointer {
                    up.resample(source.baseAddress!, sourceStride: tw,
                                into: GrayImage(base: $0.baseAddress!, width: width, height: height, stride: width + padding))
                }
            }
            var fromMask = [Float](repeating: -1, count: tw * th)
            scene.alpha.withUnsafeBufferPointer {
                down.resample(GrayView(base: $0.baseAddress!, width: width, height: height, stride: scene.alphaStride),
                              into: &fromMask, destinationStride: tw)
            }
            results += [bytes(floats), gray, bytes(fromMask)]
        }
        return results
    }

    /// The motion the element runs on every frame in async mode: the luma planes, the flow between
    /// two frames (bit for bit), and an alpha carried over four frames moving by a pixel or two, with
    /// what the carry reports. Frame sizes from a few pixels to past the slicing threshold.
    static func motion(isa: PixelISA, width: Int, height: Int, padding: Int) -> [[UInt8]] {
        let scene = scene(width: width, height: height, padding: padding, seed: UInt64(width * 31 + height * 17))
        func bytes(_ floats: [Float]) -> [UInt8] { floats.withUnsafeBytes { Array($0) } }
        // Frame k: the scene moved k pixels right and k/2 down (the edge pixels repeated).
        func moved(_ k: Int) -> [UInt8] {
            var frame = scene.frame
            for y in 0..<height {
                for x in 0..<width {
                    let from = min(max(y - k / 2, 0), height - 1) * scene.stride + min(max(x - k, 0), width - 1) * 4
                    for c in 0..<4 { frame[y * scene.stride + x * 4 + c] = scene.frame[from + c] }
                }
            }
            return frame
        }
        let frames = (0..<4).map(moved)
        var results: [[UInt8]] = []
        let carry = MotionCarry(frameWidth: width, frameHeight: height, isa: isa)
        let sizes = carry.sizes
        var lumas: [LumaPlane] = []
        for (index, frame) in frames.enumerated() {
            frame.withUnsafeBufferPointer {
                let image = BGRAImage(base: $0.baseAddress!, width: width, height: height, stride: scene.stride)
                lumas.append(LumaPlane(frame: image, width: sizes.flowWidth, height: sizes.flowHeight, isa: isa))
                carry.add(image, pts: UInt64(index) * 40)
                if index == 0 {
                    carry.follow(from: 0)
                }
            }
        }
        results += lumas.map { bytes($0.values) }
        let field = OpticalFlow(isa: isa).flow(from: lumas[3], to: lumas[0])
        results += [bytes(field.dx), bytes(field.dy)]
        let stale = scene.alpha.withUnsafeBufferPointer {
            carry.carrySized(GrayView(base: $0.baseAddress!, width: width, height: height, stride: scene.alphaStride))
        }
        var carried = [UInt8](repeating: 0x3C, count: scene.alphaStride * height)
        let report = carried.withUnsafeMutableBufferPointer {
            carry.carry(stale, from: 0, to: 120, into: GrayImage(base: $0.baseAddress!, width: width, height: height, stride: scene.alphaStride))
        }
        results += [bytes(stale), carried, report.map { withUnsafeBytes(of: ($0.frames, $0.meanPixels)) { Array($0) } } ?? []]
        return results
    }

    /// The full-size plane conversions (RVM's input and output) as bytes: the frame's three float
    /// planes, and 8-bit planes of a float plane with values in and out of [0, 1] (NaN included).
    static func planes(isa: PixelISA, width: Int, height: Int, padding: Int) -> [[UInt8]] {
        let scene = scene(width: width, height: height, padding: padding, seed: UInt64(width * 31 + height))
        let converter = PlaneConverter(isa: isa)
        var planes = [Float](repeating: -1, count: 3 * width * height)
        scene.frame.withUnsafeBufferPointer { frame in
            planes.withUnsafeMutableBufferPointer { out in
                converter.bgraToPlanarRGB(BGRAImage(base: frame.baseAddress!, width: width, height: height, stride: scene.stride),
                                          into: out.baseAddress!, planeStride: width * height)
            }
        }
        var values = [Float](repeating: 0, count: width * height)
        for i in values.indices { values[i] = Float(Int(scene.alpha[(i / width) * scene.alphaStride + i % width]) - 20) / 215 }
        if values.count > 3 { values[1] = .nan; values[2] = .infinity; values[3] = 0.5 / 255 }
        var gray = [UInt8](repeating: 0x5A, count: (width + padding) * height)
        values.withUnsafeBufferPointer { source in
            gray.withUnsafeMutableBufferPointer { out in
                converter.planeToGray(source.baseAddress!, into: GrayImage(base: out.baseAddress!, width: width, height: height,
                                                                           stride: width + padding))
            }
        }
        return [planes.withUnsafeBytes { Array($0) }, gray]
    }

    static func check(_ isa: PixelISA) {
        for (width, height, padding) in sizes {
            if planes(isa: isa, width: width, height: height, padding: padding)
                != planes(isa: .baseline, width: width, height: height, padding: padding) {
                Issue.record("\(isa) plane conversion at \(width)×\(height)+\(padding) differs from the baseline")
            }
            let expectedComposites = composites(isa: .baseline, width: width, height: height, padding: padding)
            let composites = composites(isa: isa, width: width, height: height, padding: padding)
            for index in composites.indices where composites[index] != expectedComposites[index] {
                let first = zip(composites[index], expectedComposites[index]).enumerated().first { $0.element.0 != $0.element.1 }
                Issue.record("\(isa) composite \(index) at \(width)×\(height)+\(padding): byte \(first?.offset ?? -1) differs from the baseline")
            }
            let expectedResamplings = resamplings(isa: .baseline, width: width, height: height, padding: padding)
            let resamplings = resamplings(isa: isa, width: width, height: height, padding: padding)
            for index in resamplings.indices where resamplings[index] != expectedResamplings[index] {
                Issue.record("\(isa) resampling \(index) at \(width)×\(height)+\(padding) differs from the baseline")
            }
            let expectedMotion = motion(isa: .baseline, width: width, height: height, padding: padding)
            let motion = motion(isa: isa, width: width, height: height, padding: padding)
            for index in motion.indices where motion[index] != expectedMotion[index] {
                Issue.record("\(isa) motion \(index) at \(width)×\(height)+\(padding) differs from the baseline")
            }
        }
    }

    @Test(.enabled(if: PixelISA.supported.contains(.avx2), "this CPU has no AVX2 (x86-64-v3): its build was not run"))
    func avx2GivesTheBaselineBytes() {
        Self.check(.avx2)
    }

    @Test(.enabled(if: PixelISA.supported.contains(.avx512), "this CPU has no AVX-512 (x86-64-v4): its build was not run"))
    func avx512GivesTheBaselineBytes() {
        Self.check(.avx512)
    }

    /// The baseline plane conversion is the plain arithmetic: byte/255 per channel in R, G, B order
    /// (numpy's `astype(float32) / 255`), and x·255 + 0.5 truncated, clamped to 0…255 (NaN: 0); the
    /// row padding of the 8-bit plane is left as it was.
    @Test func planeConversionIsThePlainArithmetic() {
        let (width, height, padding) = (65, 33, 4)
        let scene = Self.scene(width: width, height: height, padding: padding, seed: UInt64(width * 31 + height))
        let result = Self.planes(isa: .active, width: width, height: height, padding: padding)
        let planes = result[0].withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        for y in 0..<height {
            for x in 0..<width {
                let p = y * scene.stride + 4 * x, i = y * width + x
                #expect(planes[i] == Float(scene.frame[p + 2]) / 255)
                #expect(planes[width * height + i] == Float(scene.frame[p + 1]) / 255)
                #expect(planes[2 * width * height + i] == Float(scene.frame[p]) / 255)
            }
        }
        let gray = result[1]
        for y in 0..<height {
            for x in 0..<width {
                let i = y * width + x
                var value = Float(Int(scene.alpha[y * scene.alphaStride + x]) - 20) / 215
                if i == 1 { value = .nan } else if i == 2 { value = .infinity } else if i == 3 { value = 0.5 / 255 }
                let scaled = value * 255 + 0.5
                let expected: UInt8 = scaled >= 0 ? (scaled > 255 ? 255 : UInt8(scaled)) : 0
                #expect(gray[y * (width + padding) + x] == expected, "pixel \(x),\(y) of \(value)")
            }
            #expect(gray[(y * (width + padding) + width)..<((y + 1) * (width + padding))].allSatisfy { $0 == 0x5A })
        }
        #expect(gray[3] == 1 && gray[1] == 0 && gray[2] == 255)
    }

    /// The scenes must exercise the edge estimation (soft tiles), or the comparisons above would skip
    /// its kernels; the supported builds start at the baseline and include the active one.
    @Test func theScenesExerciseEveryKernel() {
        let scene = Self.scene(width: 257, height: 143, padding: 0, seed: 1)
        let soft = scene.alpha.filter { $0 > 0 && $0 < 255 }.count
        #expect(soft > 1000)
        let plain = Self.composites(isa: .baseline, width: 257, height: 143, padding: 0)
        #expect(plain[0] != plain[1], "edge estimation changed no byte: the scene has no soft tile")
        // The carry over the moving scene moved the alpha (else the motion kernels would go unchecked).
        let motion = Self.motion(isa: .baseline, width: 257, height: 143, padding: 0)
        #expect(motion[motion.count - 1].count == 16)
        let meanPixels = motion[motion.count - 1].withUnsafeBytes { $0.load(fromByteOffset: 8, as: Double.self) }
        #expect(meanPixels > 1, "the carry moved the alpha by \(meanPixels) px")
        #expect(PixelISA.allCases.map(\.description) == ["baseline", "avx2", "avx512"])
        #expect(PixelISA.supported.first == .baseline && PixelISA.supported.contains(PixelISA.active))
    }
}
