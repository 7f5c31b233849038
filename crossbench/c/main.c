/* crossbench adapter for C: OpenSSL 3 EVP behind the line protocol of
 * crossbench/protocol.md (RSA-OAEP with SHA-256 and MGF1-SHA-256, RSA-PSS
 * with SHA-256 and a 32-byte salt). One JSON object per line in and out;
 * requests are flat objects of strings and numbers, which is all the
 * runner sends. Key variants: "crt" and "multiprime" from the PEM (PKCS#8
 * of a PKCS#1 key, version 1 with other-prime-info for multi-prime),
 * "standard" from n, e and d alone, so that OpenSSL computes c^d mod n.
 * No benchmark framework fits C: the framework timing is not offered.
 * Build: cc -O2 main.c -o adapter $(pkg-config --libs libcrypto)
 */
#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_KEYS 64

static struct {
    char id[64];
    EVP_PKEY *key;
} keys[MAX_KEYS];
static int nkeys;

/* The string value of "name" in a flat JSON object, unescaped into a new
 * buffer (NULL if absent). */
static char *get_str(const char *line, const char *name) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":", name);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != '"') return NULL;
    p++;
    char *out = malloc(strlen(p) + 1), *o = out;
    while (*p && *p != '"') {
        if (*p == '\\' && p[1]) {
            p++;
            switch (*p) {
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            default: *o++ = *p; break;
            }
            p++;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

static long get_num(const char *line, const char *name, long dflt) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":", name);
    const char *p = strstr(line, pat);
    return p ? strtol(p + strlen(pat), NULL, 10) : dflt;
}

static unsigned char *unhex(const char *s, size_t *len) {
    size_t n = s ? strlen(s) / 2 : 0;
    unsigned char *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) { free(b); return NULL; }
        b[i] = (unsigned char)v;
    }
    *len = n;
    return b;
}

static void print_hex(const char *field, const unsigned char *b, size_t n) {
    printf("{\"ok\":true,\"%s\":\"", field);
    for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
    printf("\"}\n");
}

static void fail(const char *what) {
    unsigned long e = ERR_get_error();
    char buf[256] = "";
    if (e) ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    printf("{\"ok\":false,\"error\":\"%s%s%s\"}\n", what, e ? ": " : "", buf);
}

static EVP_PKEY *find_key(const char *id) {
    for (int i = 0; id && i < nkeys; i++)
        if (!strcmp(keys[i].id, id)) return keys[i].key;
    return NULL;
}

static EVP_PKEY_CTX *oaep_ctx(EVP_PKEY *k, int decrypt) {
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(NULL, k, NULL);
    if (!c || (decrypt ? EVP_PKEY_decrypt_init(c) : EVP_PKEY_encrypt_init(c)) <= 0 ||
        EVP_PKEY_CTX_set_rsa_padding(c, RSA_PKCS1_OAEP_PADDING) <= 0 ||
        EVP_PKEY_CTX_set_rsa_oaep_md(c, EVP_sha256()) <= 0 ||
        EVP_PKEY_CTX_set_rsa_mgf1_md(c, EVP_sha256()) <= 0) {
        EVP_PKEY_CTX_free(c);
        return NULL;
    }
    return c;
}

/* One operation; returns 1 on success. `out`/`outlen` receive the result. */
static int encrypt(EVP_PKEY *k, const unsigned char *m, size_t n, unsigned char *out, size_t *outlen) {
    EVP_PKEY_CTX *c = oaep_ctx(k, 0);
    int ok = c && EVP_PKEY_encrypt(c, out, outlen, m, n) > 0;
    EVP_PKEY_CTX_free(c);
    return ok;
}

static int decrypt(EVP_PKEY *k, const unsigned char *ct, size_t n, unsigned char *out, size_t *outlen) {
    EVP_PKEY_CTX *c = oaep_ctx(k, 1);
    int ok = c && EVP_PKEY_decrypt(c, out, outlen, ct, n) > 0;
    EVP_PKEY_CTX_free(c);
    return ok;
}

static int sign(EVP_PKEY *k, const unsigned char *m, size_t n, unsigned char *sig, size_t *siglen) {
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pc = NULL;
    int ok = md && EVP_DigestSignInit(md, &pc, EVP_sha256(), NULL, k) > 0 &&
             EVP_PKEY_CTX_set_rsa_padding(pc, RSA_PKCS1_PSS_PADDING) > 0 &&
             EVP_PKEY_CTX_set_rsa_pss_saltlen(pc, 32) > 0 &&
             EVP_DigestSign(md, sig, siglen, m, n) > 0;
    EVP_MD_CTX_free(md);
    return ok;
}

static int verify(EVP_PKEY *k, const unsigned char *m, size_t n, const unsigned char *sig, size_t siglen) {
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pc = NULL;
    int ok = md && EVP_DigestVerifyInit(md, &pc, EVP_sha256(), NULL, k) > 0 &&
             EVP_PKEY_CTX_set_rsa_padding(pc, RSA_PKCS1_PSS_PADDING) > 0 &&
             EVP_PKEY_CTX_set_rsa_pss_saltlen(pc, 32) > 0 &&
             EVP_DigestVerify(md, sig, siglen, m, n) == 1;
    EVP_MD_CTX_free(md);
    ERR_clear_error();
    return ok;
}

static EVP_PKEY *generate(int bits) {
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
    EVP_PKEY *k = NULL;
    if (!c || EVP_PKEY_keygen_init(c) <= 0 || EVP_PKEY_CTX_set_rsa_keygen_bits(c, bits) <= 0 ||
        EVP_PKEY_generate(c, &k) <= 0)
        k = NULL;
    EVP_PKEY_CTX_free(c);
    return k;
}

/* A key with no factors: n, e and d as hex. */
static EVP_PKEY *from_ned(const char *nh, const char *eh, const char *dh) {
    BIGNUM *n = NULL, *e = NULL, *d = NULL;
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    OSSL_PARAM *params = NULL;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
    EVP_PKEY *k = NULL;
    if (nh && eh && dh && BN_hex2bn(&n, nh) && BN_hex2bn(&e, eh) && BN_hex2bn(&d, dh) && bld && c &&
        OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) &&
        OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e) &&
        OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_D, d) &&
        (params = OSSL_PARAM_BLD_to_param(bld)) != NULL && EVP_PKEY_fromdata_init(c) > 0 &&
        EVP_PKEY_fromdata(c, &k, EVP_PKEY_KEYPAIR, params) <= 0)
        k = NULL;
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(bld);
    EVP_PKEY_CTX_free(c);
    BN_free(n);
    BN_free(e);
    BN_free(d);
    return k;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void bench(const char *line) {
    char *what = get_str(line, "what"), *id = get_str(line, "key");
    long n = get_num(line, "iterations", 1), reps = get_num(line, "reps", 1);
    long msg_len = get_num(line, "msg_len", 32), bits = get_num(line, "bits", 2048);
    EVP_PKEY *k = find_key(id);
    unsigned char msg[1024], in[1024], out[1024];
    size_t inlen = sizeof in, outlen;
    int ok = what && n > 0 && reps > 0 && msg_len >= 0 && msg_len <= (long)sizeof msg &&
             RAND_bytes(msg, (int)msg_len) == 1;
    int kind = !what ? -1 : !strcmp(what, "keygen") ? 0 : !strcmp(what, "encrypt") ? 1
             : !strcmp(what, "decrypt") ? 2 : !strcmp(what, "sign") ? 3 : !strcmp(what, "verify") ? 4 : -1;
    if (ok && kind < 0) { fail("unknown bench operation"); goto done; }
    if (ok && kind > 0 && !k) { fail("unknown key"); goto done; }
    if (ok && kind == 2) ok = encrypt(k, msg, msg_len, in, &inlen);
    if (ok && kind == 4) ok = sign(k, msg, msg_len, in, &inlen);
    if (!ok) { fail("bench set-up failed"); goto done; }
    printf("{\"ok\":true,\"ns\":[");
    for (long rep = 0; rep <= reps && ok; rep++) {
        double t0 = now_ns();
        for (long i = 0; i < n && ok; i++) {
            outlen = sizeof out;
            switch (kind) {
            case 0: { EVP_PKEY *g = generate((int)bits); ok = g != NULL; EVP_PKEY_free(g); break; }
            case 1: ok = encrypt(k, msg, msg_len, out, &outlen); break;
            case 2: ok = decrypt(k, in, inlen, out, &outlen); break;
            case 3: ok = sign(k, msg, msg_len, out, &outlen); break;
            case 4: ok = verify(k, msg, msg_len, in, inlen); break;
            }
        }
        double dt = now_ns() - t0;
        if (rep > 0) printf("%s%.1f", rep > 1 ? "," : "", dt / n);
    }
    printf("]}\n");
    /* A failure mid-run leaves a short list, which the runner rejects. */
done:
    free(what);
    free(id);
}

static void handle(const char *line) {
    char *op = get_str(line, "op");
    if (!op) { printf("{\"ok\":false,\"error\":\"no op\"}\n"); return; }
    if (!strcmp(op, "hello")) {
        printf("{\"ok\":true,\"name\":\"c-openssl\",\"version\":\"%s\",\"language\":\"c\","
               "\"variants\":[\"crt\",\"standard\",\"multiprime\"],\"min_bits\":512,\"framework\":\"\"}\n",
               OpenSSL_version(OPENSSL_VERSION));
    } else if (!strcmp(op, "load")) {
        char *id = get_str(line, "id"), *pem = get_str(line, "pem"), *variant = get_str(line, "variant");
        EVP_PKEY *k = NULL;
        if (variant && !strcmp(variant, "standard")) {
            char *n = get_str(line, "n"), *e = get_str(line, "e"), *d = get_str(line, "d");
            k = from_ned(n, e, d);
            free(n);
            free(e);
            free(d);
        } else {
            BIO *b = pem ? BIO_new_mem_buf(pem, -1) : NULL;
            k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
            BIO_free(b);
        }
        free(variant);
        if (!k || !id || nkeys == MAX_KEYS || strlen(id) >= sizeof keys[0].id) {
            fail("cannot load the key");
            EVP_PKEY_free(k);
        } else {
            snprintf(keys[nkeys].id, sizeof keys[0].id, "%s", id);
            keys[nkeys++].key = k;
            printf("{\"ok\":true,\"bits\":%d}\n", EVP_PKEY_get_bits(k));
        }
        free(id);
        free(pem);
    } else if (!strcmp(op, "bench")) {
        bench(line);
    } else if (!strcmp(op, "framework")) {
        printf("{\"ok\":false,\"error\":\"no benchmark framework for C: the plain timer is the measurement\"}\n");
    } else if (strcmp(op, "encrypt") && strcmp(op, "decrypt") && strcmp(op, "sign") && strcmp(op, "verify")) {
        printf("{\"ok\":false,\"error\":\"unknown op\"}\n");
    } else {
        char *id = get_str(line, "key");
        EVP_PKEY *k = find_key(id);
        char *a = get_str(line, !strcmp(op, "decrypt") ? "ct" : "msg"), *s = get_str(line, "sig");
        size_t alen = 0, slen = 0, outlen = 1024;
        unsigned char *ab = unhex(a, &alen), *sb = unhex(s, &slen), out[1024];
        if (!k) fail("unknown key");
        else if (!ab || !sb) fail("bad hex");
        else if (!strcmp(op, "encrypt")) {
            if (encrypt(k, ab, alen, out, &outlen)) print_hex("ct", out, outlen); else fail("encrypt");
        } else if (!strcmp(op, "decrypt")) {
            if (decrypt(k, ab, alen, out, &outlen)) print_hex("msg", out, outlen); else fail("decryption failed");
        } else if (!strcmp(op, "sign")) {
            if (sign(k, ab, alen, out, &outlen)) print_hex("sig", out, outlen); else fail("sign");
        } else if (!strcmp(op, "verify")) {
            printf("{\"ok\":true,\"valid\":%s}\n", verify(k, ab, alen, sb, slen) ? "true" : "false");
        } else {
            printf("{\"ok\":false,\"error\":\"unknown op\"}\n");
        }
        free(id); free(a); free(s); free(ab); free(sb);
    }
    free(op);
}

int main(void) {
    size_t cap = 0;
    char *line = NULL;
    while (getline(&line, &cap, stdin) > 0) {
        if (strstr(line, "\"op\":\"quit\"")) break;
        if (line[0] == '\n') continue;
        handle(line);
        fflush(stdout);
    }
    free(line);
    for (int i = 0; i < nkeys; i++) EVP_PKEY_free(keys[i].key);
    return 0;
}
