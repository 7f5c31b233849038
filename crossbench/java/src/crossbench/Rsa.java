package crossbench;

import java.math.BigInteger;
import java.security.KeyFactory;
import java.security.KeyPairGenerator;
import java.security.PrivateKey;
import java.security.Provider;
import java.security.PublicKey;
import java.security.SecureRandom;
import java.security.Signature;
import java.security.interfaces.RSAKey;
import java.security.interfaces.RSAPrivateCrtKey;
import java.security.spec.MGF1ParameterSpec;
import java.security.spec.PKCS8EncodedKeySpec;
import java.security.spec.PSSParameterSpec;
import java.security.spec.RSAPrivateKeySpec;
import java.security.spec.RSAPublicKeySpec;
import java.util.Base64;
import java.util.Map;
import javax.crypto.Cipher;
import javax.crypto.spec.OAEPParameterSpec;
import javax.crypto.spec.PSource;
import org.bouncycastle.jce.provider.BouncyCastleProvider;

/**
 * One key under one provider: RSA-OAEP with SHA-256 and MGF1-SHA-256
 * (named explicitly: the JDK's "OAEPWithSHA-256AndMGF1Padding" means
 * MGF1-SHA-1), RSA-PSS with SHA-256 and a 32-byte salt.
 */
final class Rsa {
    static final OAEPParameterSpec OAEP = new OAEPParameterSpec(
            "SHA-256", "MGF1", MGF1ParameterSpec.SHA256, PSource.PSpecified.DEFAULT);
    static final PSSParameterSpec PSS = new PSSParameterSpec(
            "SHA-256", "MGF1", MGF1ParameterSpec.SHA256, 32, 1);
    private static final Provider BC = new BouncyCastleProvider();
    private static final SecureRandom RNG = new SecureRandom();

    final int bits;
    private final Cipher enc;
    private final Cipher dec;
    private final Signature signer;
    private final Signature verifier;
    private final PublicKey pub;

    /** The library: "jca" (the JDK's SunJCE and SunRsaSign) or "bc". */
    static Provider provider(String lib) {
        switch (lib) {
            case "jca": return null;
            case "bc": return BC;
            default: throw new IllegalArgumentException("unknown --lib " + lib + " (jca or bc)");
        }
    }

    static String version(String lib) {
        if (provider(lib) == null) {
            return "JDK " + System.getProperty("java.version") + " SunJCE/SunRsaSign";
        }
        return "BouncyCastle " + BC.getVersionStr() + " on JDK " + System.getProperty("java.version");
    }

    private static Cipher cipher(Provider p) throws Exception {
        return p == null ? Cipher.getInstance("RSA/ECB/OAEPPadding")
                : Cipher.getInstance("RSA/ECB/OAEPPadding", p);
    }

    private static Signature pss(Provider p) throws Exception {
        Signature s = p == null ? Signature.getInstance("RSASSA-PSS")
                : Signature.getInstance("RSASSA-PSS", p);
        s.setParameter(PSS);
        return s;
    }

    private static KeyFactory factory(Provider p) throws Exception {
        return p == null ? KeyFactory.getInstance("RSA") : KeyFactory.getInstance("RSA", p);
    }

    /**
     * Loads a key from a load request: "crt" from the PKCS#8 PEM,
     * "standard" from n, e and d alone (no CRT: c^d mod n).
     */
    Rsa(String lib, Map<String, Object> req) throws Exception {
        Provider p = provider(lib);
        KeyFactory kf = factory(p);
        String variant = req.getOrDefault("variant", "crt").toString();
        PrivateKey priv;
        PublicKey pub;
        if (variant.equals("standard")) {
            BigInteger n = new BigInteger(req.get("n").toString(), 16);
            BigInteger e = new BigInteger(req.get("e").toString(), 16);
            BigInteger d = new BigInteger(req.get("d").toString(), 16);
            priv = kf.generatePrivate(new RSAPrivateKeySpec(n, d));
            pub = kf.generatePublic(new RSAPublicKeySpec(n, e));
        } else if (variant.equals("crt")) {
            String pem = req.get("pem").toString();
            String body = pem.replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", "");
            priv = kf.generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(body)));
            if (!(priv instanceof RSAPrivateCrtKey)) {
                throw new IllegalArgumentException("the PEM holds no CRT key");
            }
            RSAPrivateCrtKey c = (RSAPrivateCrtKey) priv;
            pub = kf.generatePublic(new RSAPublicKeySpec(c.getModulus(), c.getPublicExponent()));
        } else {
            throw new IllegalArgumentException("no " + variant + " keys in the JCA adapters");
        }
        bits = ((RSAKey) priv).getModulus().bitLength();
        enc = cipher(p);
        enc.init(Cipher.ENCRYPT_MODE, pub, OAEP, RNG);
        dec = cipher(p);
        dec.init(Cipher.DECRYPT_MODE, priv, OAEP);
        signer = pss(p);
        signer.initSign(priv, RNG);
        verifier = pss(p);
        verifier.initVerify(pub);
        this.pub = pub;
    }

    byte[] encrypt(byte[] m) throws Exception {
        return enc.doFinal(m);
    }

    byte[] decrypt(byte[] c) throws Exception {
        return dec.doFinal(c);
    }

    byte[] sign(byte[] m) throws Exception {
        signer.update(m);
        return signer.sign();
    }

    boolean verify(byte[] m, byte[] sig) {
        try {
            verifier.update(m);
            return verifier.verify(sig);
        } catch (Exception e) {
            try {
                verifier.initVerify(pub); // a throw leaves the object mid-use
            } catch (Exception again) {
                throw new IllegalStateException(again);
            }
            return false;
        }
    }

    static Object keygen(String lib, int bits) throws Exception {
        Provider p = provider(lib);
        KeyPairGenerator g = p == null ? KeyPairGenerator.getInstance("RSA")
                : KeyPairGenerator.getInstance("RSA", p);
        g.initialize(bits, RNG);
        return g.generateKeyPair();
    }

    /** What one bench cell calls: its input is prepared here, once. */
    interface Op {
        Object call() throws Exception;
    }

    static Op prepare(String lib, Rsa key, Map<String, Object> req) throws Exception {
        String what = req.get("what").toString();
        if (what.equals("keygen")) {
            int bits = ((Double) req.get("bits")).intValue();
            return () -> keygen(lib, bits);
        }
        if (key == null) {
            throw new IllegalArgumentException("unknown key " + req.get("key"));
        }
        int len = req.containsKey("msg_len") ? ((Double) req.get("msg_len")).intValue() : 32;
        byte[] msg = new byte[len];
        for (int i = 0; i < len; i++) {
            msg[i] = (byte) (i * 31 + 7);
        }
        switch (what) {
            case "encrypt":
                return () -> key.encrypt(msg);
            case "decrypt": {
                byte[] ct = key.encrypt(msg);
                return () -> key.decrypt(ct);
            }
            case "sign":
                return () -> key.sign(msg);
            case "verify": {
                byte[] sig = key.sign(msg);
                return () -> {
                    if (!key.verify(msg, sig)) {
                        throw new IllegalStateException("verification failed");
                    }
                    return sig;
                };
            }
            default:
                throw new IllegalArgumentException("unknown bench operation " + what);
        }
    }
}
