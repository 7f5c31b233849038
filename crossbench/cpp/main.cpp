// crossbench adapter for C++: Crypto++ behind the line protocol of
// crossbench/protocol.md (RSA-OAEP with SHA-256 and MGF1-SHA-256, RSA-PSS
// with SHA-256 and a salt as long as the hash, 32 bytes). The framework
// timing is Google Benchmark. Build:
//   c++ -O2 -std=c++17 main.cpp -o adapter -lcryptopp -lbenchmark -lpthread
#include <benchmark/benchmark.h>
#include <cryptopp/base64.h>
#include <cryptopp/cryptlib.h>
#include <cryptopp/filters.h>
#include <cryptopp/oaep.h>
#include <cryptopp/osrng.h>
#include <cryptopp/pssr.h>
#include <cryptopp/queue.h>
#include <cryptopp/rsa.h>
#include <cryptopp/sha.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using Bytes = std::vector<CryptoPP::byte>;
using Req = std::map<std::string, std::string>;

// A flat JSON object of strings and numbers, the values kept as text.
static Req parse(const std::string& s) {
    Req out;
    size_t i = 0;
    auto skip = [&] { while (i < s.size() && isspace((unsigned char)s[i])) i++; };
    auto str = [&] {
        if (i >= s.size() || s[i] != '"') throw std::runtime_error("expected a string");
        std::string v;
        for (i++; i < s.size() && s[i] != '"'; i++) {
            if (s[i] == '\\' && i + 1 < s.size()) {
                char e = s[++i];
                v += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
            } else {
                v += s[i];
            }
        }
        if (i >= s.size()) throw std::runtime_error("unterminated string");
        i++;
        return v;
    };
    skip();
    if (i >= s.size() || s[i++] != '{') throw std::runtime_error("not an object");
    for (;;) {
        skip();
        if (i < s.size() && s[i] == '}') break;
        std::string k = str();
        skip();
        if (i >= s.size() || s[i++] != ':') throw std::runtime_error("expected :");
        skip();
        if (i < s.size() && s[i] == '"') {
            out[k] = str();
        } else {
            size_t j = i;
            while (i < s.size() && s[i] != ',' && s[i] != '}') i++;
            out[k] = s.substr(j, i - j);
        }
        skip();
        if (i < s.size() && s[i] == ',') i++;
    }
    return out;
}

static std::string quote(const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if ((unsigned char)c < 0x20) { o += ' '; continue; }
        o += c;
    }
    return o + "\"";
}

static std::string hex(const Bytes& b) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (auto x : b) { s += d[x >> 4]; s += d[x & 15]; }
    return s;
}

static Bytes unhex(const std::string& s) {
    if (s.size() % 2) throw std::runtime_error("odd-length hex");
    Bytes b(s.size() / 2);
    for (size_t i = 0; i < b.size(); i++) b[i] = (CryptoPP::byte)std::stoi(s.substr(2 * i, 2), nullptr, 16);
    return b;
}

static double num(const Req& r, const char* k, double dflt) {
    auto it = r.find(k);
    return it == r.end() ? dflt : std::stod(it->second);
}

static const std::string& get(const Req& r, const char* k) {
    auto it = r.find(k);
    if (it == r.end()) throw std::runtime_error(std::string("missing ") + k);
    return it->second;
}

static CryptoPP::AutoSeededRandomPool rng;

struct Key {
    CryptoPP::RSA::PrivateKey priv;
    CryptoPP::RSA::PublicKey pub;
    std::unique_ptr<CryptoPP::RSAES<CryptoPP::OAEP<CryptoPP::SHA256>>::Encryptor> enc;
    std::unique_ptr<CryptoPP::RSAES<CryptoPP::OAEP<CryptoPP::SHA256>>::Decryptor> dec;
    std::unique_ptr<CryptoPP::RSASS<CryptoPP::PSS, CryptoPP::SHA256>::Signer> signer;
    std::unique_ptr<CryptoPP::RSASS<CryptoPP::PSS, CryptoPP::SHA256>::Verifier> verifier;

    explicit Key(const std::string& pem) {
        std::string body;
        std::istringstream lines(pem);
        for (std::string l; std::getline(lines, l);)
            if (l.rfind("-----", 0) != 0) body += l;
        CryptoPP::ByteQueue der;
        CryptoPP::StringSource(body, true, new CryptoPP::Base64Decoder(new CryptoPP::Redirector(der)));
        priv.Load(der);  // PKCS#8 PrivateKeyInfo
        if (!priv.Validate(rng, 1)) throw std::runtime_error("the key does not validate");
        pub.AssignFrom(priv);
        enc.reset(new CryptoPP::RSAES<CryptoPP::OAEP<CryptoPP::SHA256>>::Encryptor(pub));
        dec.reset(new CryptoPP::RSAES<CryptoPP::OAEP<CryptoPP::SHA256>>::Decryptor(priv));
        signer.reset(new CryptoPP::RSASS<CryptoPP::PSS, CryptoPP::SHA256>::Signer(priv));
        verifier.reset(new CryptoPP::RSASS<CryptoPP::PSS, CryptoPP::SHA256>::Verifier(pub));
    }
    unsigned bits() const { return priv.GetModulus().BitCount(); }
    Bytes encrypt(const Bytes& m) const {
        if (m.size() > enc->FixedMaxPlaintextLength()) throw std::runtime_error("message too long");
        Bytes out(enc->CiphertextLength(m.size()));
        enc->Encrypt(rng, m.data(), m.size(), out.data());
        return out;
    }
    Bytes decrypt(const Bytes& c) const {
        if (c.size() != dec->FixedCiphertextLength()) throw std::runtime_error("wrong ciphertext length");
        Bytes out(dec->MaxPlaintextLength(c.size()));
        CryptoPP::DecodingResult r = dec->Decrypt(rng, c.data(), c.size(), out.data());
        if (!r.isValidCoding) throw std::runtime_error("OAEP decryption failed");
        out.resize(r.messageLength);
        return out;
    }
    Bytes sign(const Bytes& m) const {
        Bytes sig(signer->MaxSignatureLength());
        sig.resize(signer->SignMessage(rng, m.data(), m.size(), sig.data()));
        return sig;
    }
    bool verify(const Bytes& m, const Bytes& s) const {
        return verifier->VerifyMessage(m.data(), m.size(), s.data(), s.size());
    }
};

static std::map<std::string, std::shared_ptr<Key>> keys;

static std::shared_ptr<Key> key_of(const Req& r) {
    auto it = keys.find(r.count("key") ? r.at("key") : "");
    if (it == keys.end()) throw std::runtime_error("unknown key");
    return it->second;
}

// One timed operation with its input made once.
static std::function<void()> prepare(const Req& r) {
    std::string what = get(r, "what");
    if (what == "keygen") {
        unsigned bits = (unsigned)num(r, "bits", 2048);
        return [bits] {
            CryptoPP::RSA::PrivateKey k;
            k.Initialize(rng, bits, CryptoPP::Integer(65537));
        };
    }
    auto k = key_of(r);
    Bytes msg((size_t)num(r, "msg_len", 32));
    for (size_t i = 0; i < msg.size(); i++) msg[i] = (CryptoPP::byte)(i * 31 + 7);
    if (what == "encrypt") return [k, msg] { k->encrypt(msg); };
    if (what == "decrypt") {
        Bytes ct = k->encrypt(msg);
        return [k, ct] { k->decrypt(ct); };
    }
    if (what == "sign") return [k, msg] { k->sign(msg); };
    if (what == "verify") {
        Bytes sig = k->sign(msg);
        return [k, msg, sig] {
            if (!k->verify(msg, sig)) throw std::runtime_error("verification failed");
        };
    }
    throw std::runtime_error("unknown bench operation " + what);
}

// Keeps Google Benchmark's results instead of printing them.
struct Capture : benchmark::BenchmarkReporter {
    std::vector<double> times;
    long long iterations = 0;
    std::map<std::string, double> aggregates;
    std::string error;
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>& runs) override {
        for (const Run& r : runs) {
            if (r.error_occurred) error = r.error_message;
            if (r.run_type == Run::RT_Iteration) {
                times.push_back(r.GetAdjustedRealTime());
                iterations += r.iterations;
            } else {
                aggregates[r.aggregate_name] = r.GetAdjustedRealTime();
            }
        }
    }
};

static std::string framework(const Req& r) {
    auto op = prepare(r);
    int reps = std::max(2, (int)num(r, "reps", 5));
    double seconds = std::max(0.01, num(r, "seconds", 1.0));
    benchmark::ClearRegisteredBenchmarks();
    benchmark::RegisterBenchmark("cell", [op](benchmark::State& st) {
        for (auto _ : st) {
            try {
                op();
            } catch (const std::exception& e) {
                st.SkipWithError(e.what());
                break;
            }
        }
    })->Unit(benchmark::kNanosecond)->MinTime(seconds)->Repetitions(reps);
    Capture c;
    benchmark::RunSpecifiedBenchmarks(&c);
    if (!c.error.empty()) throw std::runtime_error(c.error);
    if (c.times.empty()) throw std::runtime_error("Google Benchmark returned no result");
    std::ostringstream o;
    o.precision(12);
    o << "{\"ok\":true,\"framework\":\"Google Benchmark\",\"mean_ns\":" << c.aggregates["mean"]
      << ",\"sd_ns\":" << c.aggregates["stddev"] << ",\"median_ns\":" << c.aggregates["median"]
      << ",\"samples\":" << c.times.size() << ",\"iterations\":" << c.iterations << "}";
    return o.str();
}

static std::string handle(const Req& r) {
    std::string op = r.count("op") ? r.at("op") : "";
    if (op == "hello") {
        // LibraryVersion() is 870 for 8.7.0: the linked library, not the headers.
        int v = CryptoPP::LibraryVersion();
        std::string version = std::to_string(v / 100) + "." + std::to_string(v / 10 % 10) +
                              "." + std::to_string(v % 10);
        return "{\"ok\":true,\"name\":\"cryptopp\",\"version\":\"Crypto++ " + version +
               "\",\"language\":\"c++\",\"variants\":[\"crt\"],\"min_bits\":1024,"
               "\"framework\":\"Google Benchmark\"}";
    }
    if (op == "load") {
        if (r.count("variant") && r.at("variant") != "crt")
            throw std::runtime_error("Crypto++ computes with CRT keys only");
        auto k = std::make_shared<Key>(get(r, "pem"));
        keys[get(r, "id")] = k;
        return "{\"ok\":true,\"bits\":" + std::to_string(k->bits()) + "}";
    }
    if (op == "encrypt") return "{\"ok\":true,\"ct\":\"" + hex(key_of(r)->encrypt(unhex(get(r, "msg")))) + "\"}";
    if (op == "decrypt") return "{\"ok\":true,\"msg\":\"" + hex(key_of(r)->decrypt(unhex(get(r, "ct")))) + "\"}";
    if (op == "sign") return "{\"ok\":true,\"sig\":\"" + hex(key_of(r)->sign(unhex(get(r, "msg")))) + "\"}";
    if (op == "verify")
        return std::string("{\"ok\":true,\"valid\":") +
               (key_of(r)->verify(unhex(get(r, "msg")), unhex(get(r, "sig"))) ? "true" : "false") + "}";
    if (op == "bench") {
        auto f = prepare(r);
        long n = std::max(1L, (long)num(r, "iterations", 1));
        long reps = std::max(1L, (long)num(r, "reps", 1));
        std::ostringstream o;
        o.precision(12);
        o << "{\"ok\":true,\"ns\":[";
        for (long rep = 0; rep <= reps; rep++) {
            auto t0 = std::chrono::steady_clock::now();
            for (long i = 0; i < n; i++) f();
            double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
            if (rep > 0) o << (rep > 1 ? "," : "") << ns / n;
        }
        o << "]}";
        return o.str();
    }
    if (op == "framework") return framework(r);
    throw std::runtime_error("unknown op " + op);
}

int main(int argc, char** argv) {
    int one = 1;
    benchmark::Initialize(&one, argv);
    (void)argc;
    std::ios::sync_with_stdio(false);
    for (std::string line; std::getline(std::cin, line);) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        std::string reply;
        try {
            Req r = parse(line);
            if (r.count("op") && r.at("op") == "quit") break;
            reply = handle(r);
        } catch (const std::exception& e) {
            reply = "{\"ok\":false,\"error\":" + quote(e.what()) + "}";
        }
        std::cout << reply << "\n" << std::flush;
    }
    return 0;
}
